// Command mcptestserver runs the test MCP server of package mcptest.
//
//	mcptestserver [-transport stdio|http|sse] [-addr 127.0.0.1:0] [-pidfile F] [-hang] [-delay D] [-child]
//
// Over HTTP and SSE it prints "listening <url>" on stdout once it accepts
// connections. -pidfile writes "<pid> <pgid>"; -child starts a `sleep`
// child in its process group (an orphan to be, if the group is not
// killed); -hang never answers (a server stuck at startup); -delay waits
// that long before serving (a slow start).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/iac-code/iac-code/tools/mcp/mcptest"
)

func main() {
	transport := flag.String("transport", "stdio", "stdio, http or sse")
	addr := flag.String("addr", "127.0.0.1:0", "listen address (http, sse)")
	pidfile := flag.String("pidfile", "", "write '<pid> <pgid>' here")
	hang := flag.Bool("hang", false, "never answer")
	delay := flag.Duration("delay", 0, "wait this long before serving")
	child := flag.Bool("child", false, "start a sleeping child process")
	name := flag.String("name", "mcptest", "implementation name")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("mcptestserver: ")
	if *pidfile != "" {
		if err := os.WriteFile(*pidfile, fmt.Appendf(nil, "%d %d\n", os.Getpid(), syscall.Getpgrp()), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	if *child {
		if err := exec.Command("sleep", "300").Start(); err != nil {
			log.Fatal(err)
		}
	}
	log.Printf("starting (%s)", *transport)
	if *hang {
		select {}
	}
	time.Sleep(*delay)
	srv := mcptest.New(*name)
	switch *transport {
	case "stdio":
		if err := srv.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
			log.Printf("stdio: %v", err)
		}
	case "http", "sse":
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			log.Fatal(err)
		}
		var h http.Handler
		if *transport == "http" {
			h = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
		} else {
			h = sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return srv }, nil)
		}
		fmt.Printf("listening http://%s/\n", ln.Addr())
		log.Fatal(http.Serve(ln, mcptest.RecordHeaders(h)))
	default:
		log.Fatalf("unknown transport %q", *transport)
	}
}
