//go:build !unix

package mcp

import (
	"errors"
	"runtime"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func (s *Server) stdioTransport() (sdk.Transport, error) {
	return nil, errors.New("stdio MCP servers are not supported on " + runtime.GOOS)
}

func endGroup(int, time.Duration) {}
