// Command iac-code is an AI coding agent server speaking the Agent Client
// Protocol over stdio or HTTP+SSE. All of it is in cmd/internal/acpserver,
// which its profiling build shares.
package main

import "github.com/iac-code/iac-code/cmd/internal/acpserver"

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

func main() { acpserver.Main("iac-code", version) }
