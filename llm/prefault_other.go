//go:build !linux

package llm

// prefault leaves b's pages to be faulted in as they are written.
func prefault([]byte) {}
