//go:build !unix

package httpsse

import "net"

// peerOpen cannot probe without blocking here; a failed write is the only
// sign that the client went away.
func peerOpen(net.Conn) bool { return true }

// directWriter: no direct writes here.
type directWriter struct{}

func newDirectWriter(net.Conn) *directWriter { return nil }

func (*directWriter) write([]byte) (int, error) { return 0, nil }
