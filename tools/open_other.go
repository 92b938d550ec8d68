//go:build !unix

package tools

const (
	openNoFollow = 0
	openNonBlock = 0
)
