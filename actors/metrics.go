package actors

import "sync/atomic"

// Metrics are live counters of the actor tree. Edges export them (the HTTP
// edge as Prometheus gauges); the actors only count.
type Metrics struct {
	Connections  atomic.Int64
	Sessions     atomic.Int64
	RunningTurns atomic.Int64
	RunningTools atomic.Int64
	// FramesOut counts every frame handed to an outlet.
	FramesOut atomic.Int64
}
