//go:build !unix

package httpsse

func fileLimit() uint64 { return 0 }
