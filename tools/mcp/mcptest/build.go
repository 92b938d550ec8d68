package mcptest

import (
	"fmt"
	"os/exec"
	"path/filepath"
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
