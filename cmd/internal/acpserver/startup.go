package acpserver

import cmap "github.com/orcaman/concurrent-map"

// protoactor's process registry makes 1,024 concurrent maps of SHARD_COUNT
// (default 32) shards each in NewActorSystem: 32,768 maps and ~14 ms of the
// startup budget. 1,024 maps of one shard still spread the lock widely.
func init() { cmap.SHARD_COUNT = 1 }
