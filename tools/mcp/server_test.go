package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/tools/mcp"
	"github.com/iac-code/iac-code/tools/procgroup"
)

// callText runs a tool through its tools.Tool adapter, as the tool actor does.
func callText(st *started, tool string, input string) tools.Result {
	ev := st.connected()
	for _, t := range ev.Tools {
		if t.Name == tool {
			return tools.Execute(context.Background(), mcp.NewTool("mcp__test__"+tool, st.srv, t, 0), &tools.Env{Cwd: st.cwd},
				json.RawMessage(input), nil)
		}
	}
	Fail("no tool " + tool + " in " + strings.Join(toolNames(ev), ","))
	return tools.Result{}
}

var _ = Describe("stdio MCP servers", func() {
	It("starts the command in the session cwd, in its own process group, with the agent's environment plus the entry's", func() {
		pidfile := filepath.Join(GinkgoT().TempDir(), "pid")
		st := startServer(mcp.Config{Transport: mcp.Stdio, Command: serverBin, Args: []string{"-pidfile", pidfile},
			Env: []mcp.Pair{{Name: "FROM_ENTRY", Value: "entry"}, {Name: "SHARED", Value: "entry wins"}}},
			"PATH=/usr/bin:/bin", "SHARED=agent", "FROM_AGENT=agent")
		ev := st.connected()
		Expect(toolNames(ev)).To(ContainElements("echo_env", "slow", "rich", "crash", "write_note"))
		res := callText(st, "echo_env", `{"names":["FROM_ENTRY","SHARED","FROM_AGENT","IAC_CODE_API_KEY"]}`)
		Expect(res.IsError).To(BeFalse(), res.Output)
		Expect(res.Output).To(ContainSubstring("FROM_ENTRY=entry\nSHARED=entry wins\nFROM_AGENT=agent\nIAC_CODE_API_KEY=<unset>"))
		Expect(res.Output).To(ContainSubstring("cwd=" + st.cwd))
		pgid := readPGID(pidfile)
		Expect(pgid).NotTo(Equal(syscall.Getpgrp()))
		Expect(procgroup.Registered()).To(ContainElement(pgid), "registered with the watchdog")
		Expect(res.Output).To(ContainSubstring("pgid=" + itoa(pgid)))
		// its stderr is in our log, tagged with its name
		Expect(st.logs.String()).To(And(ContainSubstring(`"mcp_server":"test"`), ContainSubstring("mcptestserver: starting (stdio)")))
	})

	It("looks a bare command up in the PATH of the entry's environment", func() {
		dir := GinkgoT().TempDir()
		Expect(os.Symlink(serverBin, filepath.Join(dir, "my-mcp-server"))).To(Succeed())
		st := startServer(mcp.Config{Transport: mcp.Stdio, Command: "my-mcp-server",
			Env: []mcp.Pair{{Name: "PATH", Value: dir + ":/usr/bin:/bin"}}}, "PATH=/nowhere")
		st.connected()
		Expect(callText(st, "echo_env", `{"names":["PATH"]}`).Output).To(ContainSubstring("PATH=" + dir + ":/usr/bin:/bin"))
	})

	It("reports a command that does not exist as failed, naming it", func() {
		st := startServer(mcp.Config{Transport: mcp.Stdio, Command: "no-such-mcp-server-e2e"}, "PATH=/usr/bin:/bin")
		ev := st.failed()
		Expect(ev.Err).To(MatchError(ContainSubstring(`command "no-such-mcp-server-e2e" not found in PATH`)))
	})

	It("reports a server that exits at startup with its last stderr lines", func() {
		st := startServer(mcp.Config{Transport: mcp.Stdio, Command: "sh", Args: []string{"-c", "echo 'config file missing' >&2; exit 7"}})
		ev := st.failed()
		Expect(ev.Err.Error()).To(ContainSubstring("config file missing"))
	})

	It("closes a hung server at once, killing its whole group", func() {
		pidfile := filepath.Join(GinkgoT().TempDir(), "pid")
		st := startServer(mcp.Config{Transport: mcp.Stdio, Command: serverBin, Args: []string{"-pidfile", pidfile, "-hang", "-child"}})
		pgid := readPGID(pidfile)
		Consistently(func() mcp.State { return st.ev.last().State }, 300*time.Millisecond).Should(Or(Equal(mcp.State("")), Equal(mcp.Connecting)))
		start := time.Now()
		st.srv.Close()
		Expect(time.Since(start)).To(BeNumerically("<", 1500*time.Millisecond))
		expectGroupGone(pgid, time.Second)
	})

	It("closes a server wrapped in sh -c, with a child, leaving no process of its group", func() {
		pidfile := filepath.Join(GinkgoT().TempDir(), "pid")
		// sh stays the group leader (the trailing command keeps it from exec'ing)
		st := startServer(mcp.Config{Transport: mcp.Stdio, Command: "sh",
			Args: []string{"-c", `"$0" -pidfile "$1" -child; echo server ended >&2`, serverBin, pidfile}})
		st.connected()
		pgid := readPGID(pidfile)
		st.srv.Close()
		expectGroupGone(pgid, 3*time.Second)
	})

	It("reports a server that crashes as failed, fails calls to it and reaps its group", func() {
		pidfile := filepath.Join(GinkgoT().TempDir(), "pid")
		st := startServer(mcp.Config{Transport: mcp.Stdio, Command: serverBin, Args: []string{"-pidfile", pidfile, "-child"}})
		st.connected()
		pgid := readPGID(pidfile)
		res := callText(st, "crash", `{}`)
		Expect(res.IsError).To(BeTrue())
		ev := st.failed()
		Expect(ev.Err.Error()).To(ContainSubstring("server exited"))
		expectGroupGone(pgid, 3*time.Second)
		// a call after the crash is an error result, never a panic
		ev2 := st.ev.list()[0]
		for _, t := range ev2.Tools {
			if t.Name == "echo_env" {
				r := tools.Execute(context.Background(), mcp.NewTool("x", st.srv, t, 0), &tools.Env{}, json.RawMessage(`{"names":[]}`), nil)
				Expect(r.IsError).To(BeTrue())
				Expect(r.Output).To(ContainSubstring("MCP server 'test' is not connected"))
			}
		}
	})

	It("re-lists the tools after tools/list_changed", func() {
		st := startServer(mcp.Config{Transport: mcp.Stdio, Command: serverBin})
		Expect(toolNames(st.connected())).NotTo(ContainElement("late_tool"))
		Expect(callText(st, "add_tool", `{"name":"late_tool"}`).Output).To(Equal("added late_tool"))
		Eventually(func() []string { return toolNames(st.ev.last()) }, 10*time.Second, 10*time.Millisecond).Should(ContainElement("late_tool"))
		Expect(callText(st, "late_tool", `{}`).Output).To(Equal("hello from late_tool"))
		callText(st, "remove_tool", `{"name":"late_tool"}`)
		Eventually(func() []string { return toolNames(st.ev.last()) }, 10*time.Second, 10*time.Millisecond).ShouldNot(ContainElement("late_tool"))
	})

	It("streams progress notifications and cancels a call at once (the server sees notifications/cancelled)", func() {
		st := startServer(mcp.Config{Transport: mcp.Stdio, Command: serverBin})
		ev := st.connected()
		var slow *mcp.Tool
		for _, t := range ev.Tools {
			if t.Name == "slow" {
				slow = mcp.NewTool("mcp__test__slow", st.srv, t, 0)
			}
		}
		call, err := slow.Prepare(&tools.Env{}, json.RawMessage(`{"seconds":30,"steps":300}`))
		Expect(err).NotTo(HaveOccurred())
		ctx, cancel := context.WithCancel(context.Background())
		progress := make(chan string, 100)
		done := make(chan tools.Result, 1)
		go func() { done <- call.Run(ctx, func(s string) { progress <- s }) }()
		Eventually(progress, 10*time.Second).Should(Receive(HavePrefix("Progress: 1/300 — step 1")))
		start := time.Now()
		cancel()
		var res tools.Result
		Eventually(done, time.Second).Should(Receive(&res))
		Expect(time.Since(start)).To(BeNumerically("<", 500*time.Millisecond))
		Expect(res.IsError).To(BeTrue())
		Eventually(st.logs.String, 5*time.Second).Should(ContainSubstring("slow call cancelled"))
	})

	It("passes at most one progress update per 100 ms", func() {
		st := startServer(mcp.Config{Transport: mcp.Stdio, Command: serverBin})
		ev := st.connected()
		for _, t := range ev.Tools {
			if t.Name == "slow" {
				var updates []string
				start := time.Now()
				res := tools.Execute(context.Background(), mcp.NewTool("s", st.srv, t, 0), &tools.Env{},
					json.RawMessage(`{"seconds":0.5,"steps":50}`), func(s string) { updates = append(updates, s) })
				took := time.Since(start)
				Expect(res.Output).To(Equal("slept 0.5s in 50 steps"))
				// One per 100 ms of the call, however long a loaded machine
				// makes it (a fixed 8 failed when the 0.5 s took 1.8 s).
				most := int(took/(100*time.Millisecond)) + 1
				Expect(len(updates)).To(And(BeNumerically(">=", 2), BeNumerically("<=", most)), "%v in %v", updates, took)
				Expect(updates[0]).To(HavePrefix("Progress: 1/50"))
			}
		}
	})

	It("times a call out after the per-call timeout", func() {
		st := startServer(mcp.Config{Transport: mcp.Stdio, Command: serverBin})
		ev := st.connected()
		for _, t := range ev.Tools {
			if t.Name == "slow" {
				res := tools.Execute(context.Background(), mcp.NewTool("s", st.srv, t, 200*time.Millisecond), &tools.Env{},
					json.RawMessage(`{"seconds":30}`), nil)
				Expect(res.IsError).To(BeTrue())
				Expect(res.Output).To(ContainSubstring("timed out after 200ms"))
			}
		}
	})
})

var _ = Describe("HTTP MCP servers", func() {
	DescribeTable("send the entry's headers with every request",
		func(transport mcp.Transport) {
			url := startHTTPServer(string(transport))
			st := startServer(mcp.Config{Transport: transport, URL: url,
				Headers: []mcp.Pair{{Name: "Authorization", Value: "Bearer t0ken"}, {Name: "X-Team", Value: "infra"}}})
			Expect(toolNames(st.connected())).To(ContainElement("headers"))
			out := callText(st, "headers", `{}`).Output
			Expect(out).To(ContainSubstring("Authorization: Bearer t0ken"))
			Expect(out).To(ContainSubstring("X-Team: infra"))
		},
		Entry("Streamable HTTP", mcp.HTTP),
		Entry("SSE", mcp.SSE),
	)

	It("reports an unreachable server without the URL's credentials", func() {
		st := startServer(mcp.Config{Transport: mcp.HTTP, URL: "http://user:pw@127.0.0.1:1/mcp?token=s3cret"})
		ev := st.failed()
		Expect(ev.Err.Error()).NotTo(Or(ContainSubstring("s3cret"), ContainSubstring("pw@")))
		Expect(ev.Err.Error()).To(ContainSubstring("127.0.0.1:1"))
	})
})
