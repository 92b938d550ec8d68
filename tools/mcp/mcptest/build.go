package mcptest

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// Package is the import path of the test server command.
const Package = "github.com/iac-code/iac-code/tools/mcp/mcptest/mcptestserver"

// Build compiles the test server into dir and returns its path.
func Build(dir string) (string, error) {
	out := filepath.Join(dir, "mcptestserver")
	cmd := exec.Command("go", "build", "-o", out, Package)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", Package, err, msg)
	}
	return out, nil
}

// Listen starts cmd, a server that prints "listening <url>" on stdout once
// it accepts connections (mcptestserver over http or sse, e2e/node's
// mcp-everything-http.mjs), and returns that URL. The caller ends cmd.
func Listen(cmd *exec.Cmd) (string, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("%s: no address: %v", cmd.Path, err)
	}
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if !ok {
		return "", fmt.Errorf("%s said %q, not its address", cmd.Path, line)
	}
	return url, nil
}
