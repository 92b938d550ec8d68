//go:build !unix

package tools

import (
	"context"
	"runtime"
)

func runShell(context.Context, shellRun) Result {
	return Errorf("bash is not supported on " + runtime.GOOS)
}
