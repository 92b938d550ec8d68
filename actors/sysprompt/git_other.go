//go:build !unix

package sysprompt

import (
	"bytes"
	"context"
	"os/exec"

	"github.com/iac-code/iac-code/tools"
)

// runGit runs git in dir, reading at most limit bytes of its stdout.
func runGit(ctx context.Context, dir string, limit int, start Starter, args ...string) ([]byte, bool, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(tools.ChildEnv(), "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if start == nil {
		start = (*exec.Cmd).Start
	}
	err := start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	out := stdout.Bytes()
	if err != nil {
		return out, false, err
	}
	if len(out) > limit {
		return out[:limit], false, nil
	}
	return out, true, nil
}
