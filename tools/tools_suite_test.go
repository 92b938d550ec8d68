package tools_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
)

func TestTools(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Tools Suite")
}

// run runs a tool with input marshalled from v (a string is used as is).
func run(t tools.Tool, env *tools.Env, v any) tools.Result {
	return runCtx(context.Background(), t, env, v)
}

func runCtx(ctx context.Context, t tools.Tool, env *tools.Env, v any) tools.Result {
	return runProgress(ctx, t, env, v, nil)
}

// runProgress runs a tool with a Progress callback.
func runProgress(ctx context.Context, t tools.Tool, env *tools.Env, v any, progress func(string)) tools.Result {
	var in json.RawMessage
	switch x := v.(type) {
	case string:
		in = json.RawMessage(x)
	default:
		b, err := json.Marshal(v)
		Expect(err).NotTo(HaveOccurred())
		in = b
	}
	return tools.Execute(ctx, t, env, in, progress)
}

func ctx() context.Context { return context.Background() }

func raw(v any) json.RawMessage {
	b, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	return b
}

// writeFiles creates files (path → content) under dir.
func writeFiles(dir string, files map[string]string) {
	for p, c := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		Expect(os.MkdirAll(filepath.Dir(full), 0o755)).To(Succeed())
		Expect(os.WriteFile(full, []byte(c), 0o644)).To(Succeed())
	}
}

func setMtime(path string, t time.Time) {
	Expect(os.Chtimes(path, t, t)).To(Succeed())
}

// tempEnv is an Env whose Cwd and Home are fresh temp dirs (symlinks
// resolved so that paths compare equal).
func tempEnv() *tools.Env {
	cwd, err := filepath.EvalSymlinks(GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	home, err := filepath.EvalSymlinks(GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	return &tools.Env{Cwd: cwd, Home: home}
}
