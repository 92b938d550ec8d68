package httpsse

import "time"

// HoldInitialize makes e keep initialize requests from the connection actor,
// so the 30 s timeout path (504) can be tested. Call before serving.
func HoldInitialize(e *Edge) { e.holdInit = true }

// SetWriteTimeout changes the HTTP server's WriteTimeout. Call before serving.
func SetWriteTimeout(d time.Duration) func(*Edge) {
	return func(e *Edge) { e.hs.WriteTimeout = d }
}

// SetReadTimeout changes the HTTP server's ReadTimeout. Call before serving.
func SetReadTimeout(d time.Duration) func(*Edge) {
	return func(e *Edge) { e.hs.ReadTimeout = d }
}
