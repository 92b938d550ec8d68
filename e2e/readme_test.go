package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// readmeMaxBytes is the README's budget: it is for users, reference
// material lives under docs/.
const readmeMaxBytes = 20_000

// repoFile reads a file of the repository (the e2e suite runs in e2e/).
func repoFile(rel string) string {
	b, err := os.ReadFile(filepath.Join("..", rel))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return string(b)
}

// readmeBlock is the fenced code block that follows the marker
// "<!-- readme-test: name -->" in text, without its fences.
func readmeBlock(text, name string) string {
	marker := "<!-- readme-test: " + name + " -->"
	i := strings.Index(text, marker)
	ExpectWithOffset(1, i).To(BeNumerically(">=", 0), "README has no %q", marker)
	rest := strings.TrimLeft(text[i+len(marker):], "\n")
	ExpectWithOffset(1, rest).To(HavePrefix("```"), "a fenced block must follow %q", marker)
	body := rest[strings.IndexByte(rest, '\n')+1:]
	end := strings.Index(body, "\n```")
	ExpectWithOffset(1, end).To(BeNumerically(">=", 0), "the block after %q is not closed", marker)
	return body[:end+1]
}

// fencedBlocks are the bodies of the README's fenced blocks of one language.
func fencedBlocks(text, lang string) []string {
	var out []string
	var cur *strings.Builder
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur == nil && line == "```"+lang:
			cur = &strings.Builder{}
		case cur != nil && line == "```":
			out = append(out, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return out
}

var _ = Describe("README", Label("e2e", "readme"), func() {
	It("stays within its budget and shows the commands a newcomer needs", func() {
		readme := repoFile("README.md")
		Expect(len(readme)).To(BeNumerically("<=", readmeMaxBytes), "README.md is %d bytes; move reference material to docs/", len(readme))

		module := regexp.MustCompile(`(?m)^module (\S+)$`).FindStringSubmatch(repoFile("go.mod"))
		Expect(module).To(HaveLen(2))
		for _, cmd := range []string{
			"go install " + module[1] + "/cmd/iac-code@latest",
			"go run ./cmd/iac-code acp",
			"go run ./cmd/iac-code acp --transport http --port 8765",
			"iac-code prompt \"",
			"go test ./...",
			"go install github.com/go-task/task/v3/cmd/task@v3.54.0",
			`"agent_servers"`, // Zed and JetBrains
			"acp_providers",   // avante.nvim
			"codecompanion",
		} {
			Expect(readme).To(ContainSubstring(cmd))
		}
		for _, v := range []string{"IAC_CODE_HOME", "IAC_CODE_PROVIDER", "IAC_CODE_MODEL", "IAC_CODE_BASE_URL",
			"IAC_CODE_API_KEY", "IACCODE_ACP_HTTP_TOKEN", "IAC_CODE_LOG_LEVEL"} {
			Expect(readme).To(MatchRegexp("\\| `%s` \\|", v), "the README's configuration table lacks %s", v)
		}
		Expect(readme).To(ContainSubstring("| `IAC_CODE_HOME` | `~/.iac-code` |"))
		// The test command is what CI runs.
		Expect(repoFile(".ci/run")).To(MatchRegexp(`(?m)^go test \./\.\.\.$`))

		// Every JSON block can be pasted as it is.
		blocks := fencedBlocks(readme, "json")
		Expect(len(blocks)).To(BeNumerically(">=", 3))
		for _, b := range blocks {
			var v map[string]any
			Expect(json.Unmarshal([]byte(b), &v)).To(Succeed(), "README json block:\n%s", b)
		}

		// Every page under docs/ is linked from the README.
		pages, err := filepath.Glob("../docs/*.md")
		Expect(err).NotTo(HaveOccurred())
		Expect(pages).NotTo(BeEmpty())
		for _, p := range pages {
			Expect(readme).To(ContainSubstring("](docs/"+filepath.Base(p)), "README links no docs/%s: add it to the README's Documentation list", filepath.Base(p))
		}
	})

	It("has every setting the server reads in docs/configuration.md", func() {
		reference := repoFile("docs/configuration.md")
		var missing []string
		for _, v := range settingsRead() {
			if !strings.Contains(reference, "`"+v+"`") {
				missing = append(missing, v)
			}
		}
		Expect(missing).To(BeEmpty(), "settings read by the code but not documented: add a row for each to docs/configuration.md (and to the README's table when a newcomer needs it)")
	})

	It("runs its acpx blocks against the built binary", Label("node"), func() {
		readme := repoFile("README.md")
		config := readmeBlock(readme, "acpx-config")
		script := readmeBlock(readme, "acpx")

		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		fake.Script(
			llmtest.Reply{Text: "A small Go module with one package."},
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_g", Name: "glob", Arguments: `{"pattern":"**/*.go"}`}}},
			llmtest.Reply{Text: "One package: main, in hello.go."},
		)

		home := GinkgoT().TempDir()
		Expect(os.MkdirAll(filepath.Join(home, ".acpx"), 0o755)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(home, ".acpx", "config.json"), []byte(config), 0o644)).To(Succeed())
		project := GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(project, "go.mod"), []byte("module example.com/hello\n\ngo 1.26\n"), 0o644)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(project, "hello.go"), []byte("package main\n\nfunc main() {}\n"), 0o644)).To(Succeed())
		// iac-code and acpx on PATH under the names the README uses.
		bin := GinkgoT().TempDir()
		Expect(os.Symlink(binPath, filepath.Join(bin, "iac-code"))).To(Succeed())
		acpx := filepath.Join(nodeDir, "node_modules", ".bin", "acpx")
		Expect(acpx).To(BeAnExistingFile(), "acpx is installed from e2e/node's lockfile")
		Expect(os.Symlink(acpx, filepath.Join(bin, "acpx"))).To(Succeed())

		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = project
		cmd.Env = agentEnv(fake, "HOME="+home, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
			"IAC_CODE_LOG_LEVEL=warn")
		// acpx and the servers it spawns form one group, ended with the spec.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		Expect(err).NotTo(HaveOccurred(), "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())

		Expect(stdout.String()).To(ContainSubstring("A small Go module with one package."))
		Expect(stdout.String()).To(ContainSubstring("One package: main, in hello.go."))
		Expect(stdout.String() + stderr.String()).NotTo(ContainSubstring(testAPIKey))

		reqs := fake.Requests()
		Expect(reqs).To(HaveLen(3), "one model call for the first prompt, two (tool call, answer) for the second")
		Expect(lastUserText(reqs[0])).To(ContainSubstring("What does this repository do?"))
		Expect(lastUserText(reqs[1])).To(ContainSubstring("List the Go packages here."))
		// The glob ran in the project acpx was started in, without asking.
		results := reqs[2].ToolResults()
		Expect(results).To(HaveLen(1))
		Expect(results[0].Content).To(ContainSubstring("hello.go"))
	})
})

// lastUserText is the text of the request's last user message.
func lastUserText(r llmtest.RecordedRequest) string {
	msgs := r.Chat.Messages
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return msgs[i].Text()
		}
	}
	return ""
}

// settingsRead are the IAC_CODE_* and IACCODE_* variables the shipped code
// names (tests and the benchmark's own variables excluded).
func settingsRead() []string {
	re := regexp.MustCompile(`"(IAC_?CODE_[A-Z0-9_]+)"`)
	seen := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "e2e" || strings.HasPrefix(d.Name(), ".") && path != "..") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.HasPrefix(b, []byte("//go:build e2etest")) {
			return nil // test-only hooks of the e2e build are no settings
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if !strings.HasPrefix(m[1], "IACCODE_BENCH_") {
				seen[m[1]] = true
			}
		}
		return nil
	})
	Expect(err).NotTo(HaveOccurred())
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}
