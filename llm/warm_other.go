//go:build !unix

package llm

import "net"

// peerClosed cannot peek here: a connection dialled ahead is taken as
// open (a request on a closed one fails and is retried as a model error).
func peerClosed(net.Conn) bool { return false }
