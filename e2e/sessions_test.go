package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// Session persistence end to end: servers restarted on one IAC_CODE_HOME.
// exec.Cmd keeps the last of duplicate environment entries, so an
// "IAC_CODE_HOME=…" appended to agentEnv's overrides its fresh temp dir.

// interruptedText is what a repaired tool call reports (store.InterruptedText).
const interruptedText = "Session interrupted before tool execution completed."

func sessToolReply(id, name string, args any) llmtest.Reply {
	b, _ := json.Marshal(args)
	return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: id, Name: name, Arguments: string(b)}}}
}

func sessAllow(option string) map[string]any {
	return map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": option}}
}

// loadParams are session/load (and resume, fork) params.
func loadParams(sid, cwd string) map[string]any {
	return map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{}}
}

// mergeUpdates normalises updates for comparing a replay with what was seen
// live: consecutive chunks of one kind are joined (live text streams in
// pieces, a replay sends whole messages), a tool call keeps its tool_call and
// its final tool_call_update (in_progress and progress updates are live only),
// bookkeeping updates are dropped.
func mergeUpdates(ups []map[string]any) []map[string]any {
	var out []map[string]any
	for _, u := range ups {
		kind, _ := u["sessionUpdate"].(string)
		switch kind {
		case "user_message_chunk", "agent_message_chunk", "agent_thought_chunk":
			text := u["content"].(map[string]any)["text"].(string)
			if n := len(out); n > 0 && out[n-1]["sessionUpdate"] == kind {
				out[n-1]["text"] = out[n-1]["text"].(string) + text
				continue
			}
			out = append(out, map[string]any{"sessionUpdate": kind, "text": text})
		case "tool_call":
			out = append(out, u)
		case "tool_call_update":
			if s := u["status"]; s == "completed" || s == "failed" {
				out = append(out, u)
			}
		}
	}
	return out
}

func userChunk(text string) map[string]any {
	return map[string]any{"sessionUpdate": "user_message_chunk", "content": map[string]any{"type": "text", "text": text}}
}

// chatRoles is the role sequence of a model request, without the system prompt.
func chatRoles(r llmtest.RecordedRequest) []string {
	var roles []string
	for _, m := range r.Chat.Messages {
		if m.Role != "system" {
			roles = append(roles, m.Role)
		}
	}
	return roles
}

// chatTexts is the text of every message of a model request but the system prompt.
func chatTexts(r llmtest.RecordedRequest) []string {
	var texts []string
	for _, m := range r.Chat.Messages {
		if m.Role != "system" {
			texts = append(texts, m.Text())
		}
	}
	return texts
}

func lastRequest(fake *llmtest.Server) llmtest.RecordedRequest {
	reqs := fake.Requests()
	ExpectWithOffset(1, reqs).NotTo(BeEmpty())
	return reqs[len(reqs)-1]
}

func readMeta(home, sid string) map[string]any {
	raw, err := os.ReadFile(filepath.Join(home, "sessions", sid, "meta.json"))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	var m map[string]any
	ExpectWithOffset(1, json.Unmarshal(raw, &m)).To(Succeed())
	return m
}

func historyPath(home, sid string) string {
	return filepath.Join(home, "sessions", sid, "history.jsonl")
}

// responseIndex is the position of the answer to request id on the wire.
func (a *agent) responseIndex(id float64) int {
	i, _ := a.waitFor("response "+strconv.Itoa(int(id)), func(m map[string]any) bool { return m["id"] == id && m["method"] == nil })
	return i
}

// updateOf returns the update of a session/update message, or nil.
func updateOf(m map[string]any) map[string]any {
	if m["method"] != "session/update" {
		return nil
	}
	u, _ := m["params"].(map[string]any)["update"].(map[string]any)
	return u
}

// waitUpdate waits for the first session/update of the kind at or after
// wire position from.
func (a *agent) waitUpdate(kind string, from int) (int, map[string]any) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		msgs := a.messages()
		for i := from; i < len(msgs); i++ {
			if u := updateOf(msgs[i]); u != nil && u["sessionUpdate"] == kind {
				return i, u
			}
		}
		if time.Now().After(deadline) {
			Fail("timed out waiting for " + kind)
		}
		select {
		case <-a.arrived:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// sessionUpdates returns the updates for session sid written from wire
// position from up to the answer to request id.
func (a *agent) sessionUpdates(sid string, from int, id float64) []map[string]any {
	end := a.responseIndex(id)
	var out []map[string]any
	for _, m := range a.messages()[from:end] {
		if u := updateOf(m); u != nil && m["params"].(map[string]any)["sessionId"] == sid {
			out = append(out, u)
		}
	}
	return out
}

// mark is the current wire position.
func (a *agent) mark() int { return len(a.messages()) }

// requestChecked sends a request whose response the wire checker validates
// as the response of checkAs: session/fork is an unstable ACP method, absent
// from the stable v1 schema; its response has the shape of session/new's.
func (a *agent) requestChecked(method, checkAs string, params any) float64 {
	a.mu.Lock()
	a.nextID++
	id := a.nextID
	a.mu.Unlock()
	line, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	Expect(err).NotTo(HaveOccurred())
	asChecked, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": checkAs})
	a.check.ClientSent(asChecked)
	_, err = a.stdin.Write(append(line, '\n'))
	Expect(err).NotTo(HaveOccurred())
	return float64(id)
}

// rawResponse is the exact line the server wrote for request id.
func (a *agent) rawResponse(id float64) []byte {
	i := a.responseIndex(id)
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.raw[i]
}

var _ = Describe("sessions on disk over stdio", Label("e2e", "sessions"), func() {
	var (
		fake *llmtest.Server
		home string
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		home = GinkgoT().TempDir()
		cwd = GinkgoT().TempDir()
	})
	// start runs a server on the shared home.
	start := func(extraEnv ...string) *agent {
		a := startAgent(agentEnv(fake, append([]string{"IAC_CODE_HOME=" + home}, extraEnv...)...))
		a.initialize()
		return a
	}

	It("survives a restart: list shows it with its title, load replays every update before the response, the next prompt has the whole context", func() {
		fake.Script(
			llmtest.Reply{Thinking: "The user states a number.", Text: "Noted: the number is 42."},
			sessToolReply("w1", "write_file", map[string]any{"path": "notes.txt", "content": "number: 42\n"}),
			llmtest.Reply{Text: "I wrote notes.txt."},
			llmtest.Reply{Text: "It was 42."},
		)
		a := start()
		sid := a.newSession(cwd)
		// the commands come with the new session
		_, cmds := a.waitUpdate("available_commands_update", 0)
		var names []string
		for _, c := range cmds["availableCommands"].([]any) {
			names = append(names, c.(map[string]any)["name"].(string))
		}
		Expect(names).To(ConsistOf("compact", "clear", "model", "mode", "status", "init"))

		from := a.mark()
		p1 := a.prompt(sid, "  Remember\n the number   42  ")
		Expect(a.result(p1)["stopReason"]).To(Equal("end_turn"))
		live := append([]map[string]any{userChunk("  Remember\n the number   42  ")}, a.sessionUpdates(sid, from, p1)...)
		from = a.mark()
		p2 := a.prompt(sid, "write it down")
		a.answer(a.serverRequest("session/request_permission", 0)["id"], sessAllow("allow_once"))
		Expect(a.result(p2)["stopReason"]).To(Equal("end_turn"))
		Expect(filepath.Join(cwd, "notes.txt")).To(BeAnExistingFile())
		live = append(live, userChunk("write it down"))
		live = append(live, a.sessionUpdates(sid, from, p2)...)
		Expect(mergeUpdates(live)).To(ContainElement(And(HaveKeyWithValue("sessionUpdate", "tool_call_update"),
			HaveKeyWithValue("content", ContainElement(HaveKeyWithValue("type", "diff"))))))
		a.finish()

		b := start()
		for _, method := range []string{"session/list", "sessions/list"} {
			res := b.result(b.request(method, map[string]any{"cwd": cwd}))
			Expect(res["sessions"]).To(HaveLen(1), method)
			info := res["sessions"].([]any)[0].(map[string]any)
			Expect(info).To(HaveKeyWithValue("sessionId", sid))
			Expect(info).To(HaveKeyWithValue("cwd", cwd))
			Expect(info).To(HaveKeyWithValue("title", "Remember the number 42"))
			_, err := time.Parse(time.RFC3339, info["updatedAt"].(string))
			Expect(err).NotTo(HaveOccurred())
			Expect(res).NotTo(HaveKey("nextCursor"))
		}
		// another cwd lists nothing
		Expect(b.result(b.request("session/list", map[string]any{"cwd": GinkgoT().TempDir()}))["sessions"]).To(BeEmpty())

		from = b.mark()
		load := b.request("session/load", loadParams(sid, cwd))
		res := b.result(load)
		Expect(res).To(HaveKey("modes"))
		Expect(res["modes"]).To(HaveKeyWithValue("currentModeId", "default"))
		Expect(res["models"]).To(HaveKeyWithValue("currentModelId", "test-model"))
		Expect(res["configOptions"]).To(ContainElement(HaveKeyWithValue("id", "mode")))
		Expect(res["configOptions"]).To(ContainElement(HaveKeyWithValue("id", "model")))
		// every update of the replay precedes the response on the wire, and
		// the same ids and content as live (the diff included)
		replay := b.sessionUpdates(sid, from, load)
		Expect(mergeUpdates(replay)).To(Equal(mergeUpdates(live)))
		for _, u := range replay {
			if u["sessionUpdate"] == "tool_call_update" {
				Expect(u["status"]).To(BeElementOf("completed", "failed"), "a replay has final tool updates only")
			}
		}
		respAt := b.responseIndex(load)
		cmdAt, _ := b.waitUpdate("available_commands_update", respAt)
		Expect(cmdAt).To(Equal(respAt+1), "only the commands follow the load response")
		for _, m := range b.messages()[:respAt] {
			if u := updateOf(m); u != nil {
				Expect(m["params"]).To(HaveKeyWithValue("sessionId", sid))
			}
		}

		p3 := b.prompt(sid, "what was the number?")
		Expect(b.result(p3)["stopReason"]).To(Equal("end_turn"))
		req := lastRequest(fake)
		Expect(chatRoles(req)).To(Equal([]string{"user", "assistant", "user", "assistant", "tool", "assistant", "user"}))
		texts := chatTexts(req)
		Expect(texts[0]).To(Equal("  Remember\n the number   42  "))
		Expect(texts[1]).To(Equal("Noted: the number is 42."))
		Expect(texts[5]).To(Equal("I wrote notes.txt."))
		Expect(texts[6]).To(Equal("what was the number?"))
		Expect(req.Chat.Messages[len(req.Chat.Messages)-3].ToolCallID).To(Equal("w1"))
		b.finish()
	})

	It("resumes without replay and without a sessionId in the response; the prompt continues the context", func() {
		fake.Script(llmtest.Reply{Text: "first answer"}, llmtest.Reply{Text: "second answer"})
		a := start()
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "first question"))["stopReason"]).To(Equal("end_turn"))
		a.finish()

		b := start()
		id := b.request("session/resume", map[string]any{"sessionId": sid, "cwd": cwd})
		res := b.result(id)
		Expect(res).NotTo(HaveKey("sessionId"))
		Expect(res["modes"]).To(HaveKeyWithValue("currentModeId", "default"))
		Expect(b.allUpdatesBefore(id)).To(BeEmpty())
		p := b.prompt(sid, "second question")
		Expect(b.result(p)["stopReason"]).To(Equal("end_turn"))
		// nothing was replayed later either
		for _, u := range b.allUpdatesBefore(p) {
			Expect(u["sessionUpdate"]).NotTo(Equal("user_message_chunk"))
		}
		Expect(chatTexts(lastRequest(fake))).To(Equal([]string{"first question", "first answer", "second question"}))
		b.finish()
	})

	It("forks into an independent copy that replays like load", func() {
		fake.Script(llmtest.Reply{Text: "shared answer"}, llmtest.Reply{Text: "fork answer"}, llmtest.Reply{Text: "origin answer"})
		a := start()
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "shared question"))["stopReason"]).To(Equal("end_turn"))
		forkID := a.requestChecked("session/fork", "session/new", loadParams(sid, cwd))
		res := a.result(forkID)
		fid, _ := res["sessionId"].(string)
		Expect(fid).NotTo(BeEmpty())
		Expect(fid).NotTo(Equal(sid))
		Expect(res["modes"]).To(HaveKeyWithValue("currentModeId", "default"))
		// valid as the unstable schema's ForkSessionResponse too
		unstable := loadSchema(filepath.Join(nodeDir, "node_modules", "@agentclientprotocol", "sdk", "schema", "v1", "schema.unstable.json"))
		checker := newWireChecker(unstable)
		checker.ClientSent([]byte(`{"jsonrpc":"2.0","id":` + strconv.Itoa(int(forkID)) + `,"method":"session/fork"}`))
		checker.ServerSent(a.rawResponse(forkID))
		Expect(checker.Violations()).To(BeEmpty())
		Expect(checker.Passed).To(Equal(1))

		Expect(mergeUpdates(a.sessionUpdates(fid, 0, forkID))).To(Equal([]map[string]any{
			{"sessionUpdate": "user_message_chunk", "text": "shared question"},
			{"sessionUpdate": "agent_message_chunk", "text": "shared answer"},
		}))

		Expect(a.result(a.prompt(fid, "fork question"))["stopReason"]).To(Equal("end_turn"))
		Expect(chatTexts(lastRequest(fake))).To(Equal([]string{"shared question", "shared answer", "fork question"}))
		Expect(a.result(a.prompt(sid, "origin question"))["stopReason"]).To(Equal("end_turn"))
		Expect(chatTexts(lastRequest(fake))).To(Equal([]string{"shared question", "shared answer", "origin question"}))
		a.finish()
		Expect(readMeta(home, fid)).To(HaveKeyWithValue("forkedFrom", sid))

		// both are on disk, each with its own history
		b := start()
		list := b.result(b.request("session/list", map[string]any{"cwd": cwd}))["sessions"].([]any)
		Expect(list).To(HaveLen(2))
		load := b.request("session/load", loadParams(sid, cwd))
		b.result(load)
		Expect(chatText(b.sessionUpdates(sid, 0, load), "user_message_chunk")).To(Equal("shared questionorigin question"))
		load = b.request("session/load", loadParams(fid, cwd))
		b.result(load)
		Expect(chatText(b.sessionUpdates(fid, 0, load), "user_message_chunk")).To(Equal("shared questionfork question"))
		Expect(chatText(b.sessionUpdates(fid, 0, load), "agent_message_chunk")).To(Equal("shared answerfork answer"))
		b.finish()
	})

	It("pages session/list by 50 with nextCursor over 120 sessions, newest first, filtered by cwd", func() {
		a := start()
		other := GinkgoT().TempDir()
		var ids []float64
		for i := 0; i < 120; i++ {
			ids = append(ids, a.request("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}))
		}
		for i := 0; i < 3; i++ {
			ids = append(ids, a.request("session/new", map[string]any{"cwd": other, "mcpServers": []any{}}))
		}
		created := map[string]bool{}
		for _, id := range ids[:120] {
			created[a.result(id)["sessionId"].(string)] = true
		}
		for _, id := range ids[120:] {
			a.result(id)
		}
		Expect(created).To(HaveLen(120))

		listAll := func(method string, params map[string]any) ([]map[string]any, []int) {
			var all []map[string]any
			var sizes []int
			cursor := ""
			for page := 0; page < 10; page++ {
				p := map[string]any{}
				for k, v := range params {
					p[k] = v
				}
				if cursor != "" {
					p["cursor"] = cursor
				}
				res := a.result(a.request(method, p))
				sessions := res["sessions"].([]any)
				sizes = append(sizes, len(sessions))
				for _, s := range sessions {
					all = append(all, s.(map[string]any))
				}
				next, _ := res["nextCursor"].(string)
				if next == "" {
					return all, sizes
				}
				cursor = next
			}
			Fail("list never ended")
			return nil, nil
		}
		got, sizes := listAll("session/list", map[string]any{"cwd": cwd})
		Expect(sizes).To(Equal([]int{50, 50, 20}))
		seen := map[string]bool{}
		var stamps []string
		for _, s := range got {
			id := s["sessionId"].(string)
			Expect(seen[id]).To(BeFalse(), "duplicate %s", id)
			seen[id] = true
			Expect(created[id]).To(BeTrue())
			Expect(s["cwd"]).To(Equal(cwd))
			stamps = append(stamps, s["updatedAt"].(string))
		}
		Expect(seen).To(HaveLen(120))
		Expect(sort.IsSorted(sort.Reverse(sort.StringSlice(stamps)))).To(BeTrue(), "newest first")

		_, sizes = listAll("sessions/list", map[string]any{})
		Expect(sizes).To(Equal([]int{50, 50, 23}))
		_, sizes = listAll("sessions/list", map[string]any{"cwd": other})
		Expect(sizes).To(Equal([]int{3}))

		e := a.errorOf(a.request("session/list", map[string]any{"cwd": cwd, "cursor": "not-a-cursor"}))
		Expect(e["code"]).To(Equal(-32602.0))
		a.finish()
	})

	It("repairs a tool call cut by kill -9 of the server: load shows it failed, no completed message is lost, the model gets a result", func() {
		pidFile := filepath.Join(cwd, "bash.pid")
		fake.Script(
			llmtest.Reply{Text: "hello to you"},
			sessToolReply("b1", "bash", map[string]any{"command": "echo $$ > bash.pid; sleep 30"}),
			llmtest.Reply{Text: "the command was interrupted"},
		)
		a := start()
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "hello"))["stopReason"]).To(Equal("end_turn"))
		a.prompt(sid, "run the long command")
		a.answer(a.serverRequest("session/request_permission", 0)["id"], sessAllow("allow_once"))
		a.waitFor("b1 in progress", func(m map[string]any) bool {
			u := updateOf(m)
			return u != nil && u["toolCallId"] == "b1" && u["status"] == "in_progress"
		})
		Eventually(pidFile, 20*time.Second, 50*time.Millisecond).Should(BeAnExistingFile())
		Expect(a.cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
		_ = a.cmd.Wait()
		<-a.eof
		Expect(a.check.Violations()).To(BeEmpty())
		// the orphaned command goes too (its process group is its pid)
		raw, err := os.ReadFile(pidFile)
		Expect(err).NotTo(HaveOccurred())
		if pgid, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil && pgid > 1 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}

		b := start()
		load := b.request("session/load", loadParams(sid, cwd))
		b.result(load)
		Expect(b.result(load)["_meta"]).To(HaveKeyWithValue("activeTurn", HaveKeyWithValue("state", "interrupted")))
		replay := mergeUpdates(b.sessionUpdates(sid, 0, load))
		Expect(replay).To(HaveLen(6))
		Expect(replay[5]).To(Equal(map[string]any{"sessionUpdate": "agent_message_chunk",
			"text": "[Turn interrupted: the agent process stopped before it ended]"}))
		Expect(replay[0]).To(Equal(map[string]any{"sessionUpdate": "user_message_chunk", "text": "hello"}))
		Expect(replay[1]).To(Equal(map[string]any{"sessionUpdate": "agent_message_chunk", "text": "hello to you"}))
		Expect(replay[2]).To(Equal(map[string]any{"sessionUpdate": "user_message_chunk", "text": "run the long command"}))
		Expect(replay[3]).To(And(HaveKeyWithValue("sessionUpdate", "tool_call"), HaveKeyWithValue("toolCallId", "b1"),
			HaveKeyWithValue("kind", "execute")))
		Expect(replay[4]).To(And(HaveKeyWithValue("sessionUpdate", "tool_call_update"), HaveKeyWithValue("toolCallId", "b1"),
			HaveKeyWithValue("status", "failed")))
		Expect(replay[4]["content"]).To(ContainElement(HaveKeyWithValue("content",
			map[string]any{"type": "text", "text": interruptedText})))

		p := b.prompt(sid, "what happened?")
		Expect(b.result(p)["stopReason"]).To(Equal("end_turn"))
		req := lastRequest(fake)
		Expect(chatRoles(req)).To(Equal([]string{"user", "assistant", "user", "assistant", "tool", "user", "user"}))
		msgs := req.Chat.Messages
		Expect(msgs[len(msgs)-4].ToolCalls).To(HaveLen(1))
		Expect(msgs[len(msgs)-4].ToolCalls[0].ID).To(Equal("b1"))
		Expect(msgs[len(msgs)-3].ToolCallID).To(Equal("b1"))
		Expect(msgs[len(msgs)-3].Text()).To(Equal(interruptedText))
		Expect(msgs[len(msgs)-2].Text()).To(And(ContainSubstring("The previous turn was interrupted"),
			ContainSubstring("bash (b1)"), ContainSubstring("not run again")))
		b.finish()

		// the repair was persisted once, and loading again does not repeat it
		c := start()
		c.result(c.request("session/load", loadParams(sid, cwd)))
		c.finish()
		hist, err := os.ReadFile(historyPath(home, sid))
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.Count(string(hist), interruptedText)).To(Equal(1))
		Expect(strings.Count(string(hist), `"kind":"interrupted"`)).To(Equal(1))
	})

	It("skips a truncated last history line on load and appends cleanly after it", func() {
		fake.Script(llmtest.Reply{Text: "answer one"}, llmtest.Reply{Text: "answer two"})
		a := start()
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "question one"))["stopReason"]).To(Equal("end_turn"))
		a.finish()
		f, err := os.OpenFile(historyPath(home, sid), os.O_WRONLY|os.O_APPEND, 0)
		Expect(err).NotTo(HaveOccurred())
		_, err = f.WriteString(`{"seq":3,"time":"2026-01-01T00:00:00Z","kind":"message","message":{"role":"assist`)
		Expect(err).NotTo(HaveOccurred())
		Expect(f.Close()).To(Succeed())

		b := start()
		load := b.request("session/load", loadParams(sid, cwd))
		b.result(load)
		Expect(mergeUpdates(b.sessionUpdates(sid, 0, load))).To(Equal([]map[string]any{
			{"sessionUpdate": "user_message_chunk", "text": "question one"},
			{"sessionUpdate": "agent_message_chunk", "text": "answer one"},
		}))
		Expect(b.stderr.String()).To(ContainSubstring("truncated last history line"))
		Expect(b.result(b.prompt(sid, "question two"))["stopReason"]).To(Equal("end_turn"))
		Expect(chatTexts(lastRequest(fake))).To(Equal([]string{"question one", "answer one", "question two"}))
		b.finish()

		hist, err := os.ReadFile(historyPath(home, sid))
		Expect(err).NotTo(HaveOccurred())
		lines := strings.Split(strings.TrimSuffix(string(hist), "\n"), "\n")
		Expect(lines).To(HaveLen(4))
		for _, l := range lines {
			Expect(json.Valid([]byte(l))).To(BeTrue(), "line %q", l)
		}
	})

	It("in plan mode offers and runs no write tools; the mode survives a restart", func() {
		fake.Script(sessToolReply("w1", "write_file", map[string]any{"path": "plan.txt", "content": "x"}), llmtest.Reply{Text: "cannot write"})
		a := start()
		sid := a.newSession(cwd)
		bad := a.request("session/set_mode", map[string]any{"sessionId": sid, "modeId": "yolo"})
		e := a.errorOf(bad)
		Expect(e["code"]).To(Equal(-32602.0))
		set := a.request("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"})
		Expect(a.result(set)).To(BeEmpty())
		// The clients are told of the change, then the request is answered.
		at := a.responseIndex(bad)
		i, mode := a.waitUpdate("current_mode_update", at)
		Expect(i).To(BeNumerically("<", a.responseIndex(set)))
		Expect(mode).To(HaveKeyWithValue("currentModeId", "plan"))
		_, opts := a.waitUpdate("config_option_update", at)
		Expect(opts["configOptions"]).To(ContainElement(And(HaveKeyWithValue("id", "mode"), HaveKeyWithValue("currentValue", "plan"))))

		p := a.prompt(sid, "write plan.txt")
		Expect(a.result(p)["stopReason"]).To(Equal("end_turn"))
		Expect(filepath.Join(cwd, "plan.txt")).NotTo(BeAnExistingFile())
		final := mergeUpdates(a.updatesBefore(p))
		Expect(final).To(ContainElement(And(HaveKeyWithValue("toolCallId", "w1"), HaveKeyWithValue("status", "failed"))))
		for _, m := range a.messages() {
			Expect(m["method"]).NotTo(Equal("session/request_permission"))
		}
		var offered []string
		for _, t := range fake.Requests()[0].Chat.Tools {
			offered = append(offered, t.Function.Name)
		}
		Expect(offered).To(ContainElement("read_file"))
		for _, name := range []string{"write_file", "edit_file", "bash"} {
			Expect(offered).NotTo(ContainElement(name))
		}
		a.finish()

		b := start()
		res := b.result(b.request("session/load", loadParams(sid, cwd)))
		Expect(res["modes"]).To(HaveKeyWithValue("currentModeId", "plan"))
		Expect(res["configOptions"]).To(ContainElement(And(HaveKeyWithValue("id", "mode"), HaveKeyWithValue("currentValue", "plan"))))
		b.finish()
	})

	It("sets mode and model through config/set and session/set_config_option; unknown ids and values are -32602", func() {
		fake.Script(sessToolReply("w1", "write_file", map[string]any{"path": "edit.txt", "content": "accepted\n"}), llmtest.Reply{Text: "done"})
		a := start()
		sid := a.newSession(cwd)
		from := a.mark()
		set := a.request("config/set", map[string]any{"sessionId": sid, "configId": "mode", "value": "accept_edits"})
		res := a.result(set)
		Expect(res["configOptions"]).To(ContainElement(And(HaveKeyWithValue("id", "mode"), HaveKeyWithValue("currentValue", "accept_edits"))))
		_, mode := a.waitUpdate("current_mode_update", from)
		Expect(mode).To(HaveKeyWithValue("currentModeId", "accept_edits"))
		res = a.result(a.request("session/set_config_option", map[string]any{"sessionId": sid, "configId": "model", "value": "test-model"}))
		Expect(res["configOptions"]).To(ContainElement(And(HaveKeyWithValue("id", "model"), HaveKeyWithValue("currentValue", "test-model"))))
		for _, bad := range []map[string]any{
			{"sessionId": sid, "configId": "colour", "value": "blue"},
			{"sessionId": sid, "configId": "mode", "value": "yolo"},
			{"sessionId": sid, "configId": "model", "value": "no-such-model"},
		} {
			Expect(a.errorOf(a.request("config/set", bad))["code"]).To(Equal(-32602.0), "%v", bad)
		}
		// accept_edits writes without asking
		Expect(a.result(a.prompt(sid, "write edit.txt"))["stopReason"]).To(Equal("end_turn"))
		Expect(os.ReadFile(filepath.Join(cwd, "edit.txt"))).To(Equal([]byte("accepted\n")))
		for _, m := range a.messages() {
			Expect(m["method"]).NotTo(Equal("session/request_permission"))
		}
		a.finish()
		Expect(readMeta(home, sid)).To(HaveKeyWithValue("mode", "accept_edits"))

		b := start()
		res = b.result(b.request("session/resume", map[string]any{"sessionId": sid, "cwd": cwd}))
		Expect(res["modes"]).To(HaveKeyWithValue("currentModeId", "accept_edits"))
		b.finish()
	})

	It("remembers allow_always across a restart", func() {
		fake.Script(
			sessToolReply("b1", "bash", map[string]any{"command": "echo first"}), llmtest.Reply{Text: "ran once"},
			sessToolReply("b2", "bash", map[string]any{"command": "echo second"}), llmtest.Reply{Text: "ran twice"},
		)
		a := start()
		sid := a.newSession(cwd)
		p := a.prompt(sid, "run it")
		a.answer(a.serverRequest("session/request_permission", 0)["id"], sessAllow("allow_always"))
		Expect(a.result(p)["stopReason"]).To(Equal("end_turn"))
		a.finish()
		Expect(readMeta(home, sid)["permissions"]).To(Equal(map[string]any{"bash": "allow"}))

		b := start()
		b.result(b.request("session/load", loadParams(sid, cwd)))
		p = b.prompt(sid, "run it again")
		Expect(b.result(p)["stopReason"]).To(Equal("end_turn"))
		Expect(mergeUpdates(b.updatesBefore(p))).To(ContainElement(And(HaveKeyWithValue("toolCallId", "b2"),
			HaveKeyWithValue("status", "completed"))))
		for _, m := range b.messages() {
			Expect(m["method"]).NotTo(Equal("session/request_permission"))
		}
		Expect(lastRequest(fake).Chat.Messages[len(lastRequest(fake).Chat.Messages)-1].Text()).To(ContainSubstring("second"))
		b.finish()
	})

	It("reports usage per model call, cumulative per turn, and keeps the session total", func() {
		Expect(os.WriteFile(filepath.Join(cwd, "a.txt"), []byte("alpha\n"), 0o600)).To(Succeed())
		read := sessToolReply("r1", "read_file", map[string]any{"path": "a.txt"})
		read.Usage = &llmtest.Usage{PromptTokens: 100, CompletionTokens: 10}
		fake.Script(read,
			llmtest.Reply{Text: "it says alpha", Usage: &llmtest.Usage{PromptTokens: 130, CompletionTokens: 7}},
			llmtest.Reply{Text: "bye", Usage: &llmtest.Usage{PromptTokens: 150, CompletionTokens: 2}})
		a := start("IAC_CODE_CONTEXT_WINDOW=50000")
		sid := a.newSession(cwd)
		p := a.prompt(sid, "read a.txt")
		res := a.result(p)
		Expect(res["usage"]).To(Equal(map[string]any{"inputTokens": 230.0, "outputTokens": 17.0, "totalTokens": 247.0}))
		var usage []map[string]any
		for _, u := range a.allUpdatesBefore(p) {
			if u["sessionUpdate"] == "usage_update" {
				usage = append(usage, u)
			}
		}
		Expect(usage).To(Equal([]map[string]any{
			{"sessionUpdate": "usage_update", "used": 110.0, "size": 50000.0},
			{"sessionUpdate": "usage_update", "used": 137.0, "size": 50000.0},
		}))
		Expect(a.result(a.prompt(sid, "bye"))["usage"]).To(HaveKeyWithValue("totalTokens", 152.0))
		a.finish()
		Expect(readMeta(home, sid)["usage"]).To(And(HaveKeyWithValue("inputTokens", 380.0), HaveKeyWithValue("outputTokens", 19.0)))
	})

	It("compacts the oldest turns when the context nears a small window, keeps the full history on disk, and the summary is the context from then on", func() {
		long := func(tag string) string { return tag + " " + strings.Repeat(tag[:1], 1000) }
		fake.Script(
			llmtest.Reply{Text: "a1"}, llmtest.Reply{Text: "a2"}, llmtest.Reply{Text: "a3"},
			llmtest.Reply{Text: "SUMMARY: the user sent four long messages."}, // the compaction call
			llmtest.Reply{Text: "a4"}, llmtest.Reply{Text: "a5"}, llmtest.Reply{Text: "a6"},
		)
		a := start("IAC_CODE_CONTEXT_WINDOW=1000")
		sid := a.newSession(cwd)
		for _, t := range []string{"u1", "u2", "u3"} {
			Expect(a.result(a.prompt(sid, long(t)))["stopReason"]).To(Equal("end_turn"))
		}
		Expect(fake.Requests()).To(HaveLen(3))
		from := a.mark()
		p4 := a.prompt(sid, long("u4"))
		Expect(a.result(p4)["stopReason"]).To(Equal("end_turn"))
		reqs := fake.Requests()
		Expect(reqs).To(HaveLen(5))
		// the summary call saw the oldest turn and the summary prompt
		summaryCall := chatTexts(reqs[3])
		Expect(summaryCall[0]).To(Equal(long("u1")))
		Expect(summaryCall).NotTo(ContainElement(long("u2")))
		Expect(summaryCall[len(summaryCall)-1]).To(ContainSubstring("Summarize"))
		// the client was told, before the answer
		text := chatText(a.sessionUpdates(sid, from, p4), "agent_message_chunk")
		Expect(text).To(MatchRegexp(`^Context compacted: \d+ → \d+ tokens`))
		Expect(text).To(HaveSuffix("a4"))
		// the model continued on the summary and the last three turns
		Expect(chatTexts(reqs[4])).To(Equal([]string{"SUMMARY: the user sent four long messages.",
			long("u2"), "a2", long("u3"), "a3", long("u4")}))
		Expect(a.result(a.prompt(sid, "short"))["stopReason"]).To(Equal("end_turn"))
		Expect(chatTexts(lastRequest(fake))[0]).To(HavePrefix("SUMMARY:"))
		a.finish()

		// after a restart: the replay has everything, the context the summary
		b := start("IAC_CODE_CONTEXT_WINDOW=1000")
		load := b.request("session/load", loadParams(sid, cwd))
		b.result(load)
		replay := b.sessionUpdates(sid, 0, load)
		Expect(chatText(replay, "user_message_chunk")).To(Equal(long("u1") + long("u2") + long("u3") + long("u4") + "short"))
		Expect(chatText(replay, "agent_message_chunk")).To(ContainSubstring("a1"))
		Expect(b.result(b.prompt(sid, "again"))["stopReason"]).To(Equal("end_turn"))
		texts := chatTexts(lastRequest(fake))
		Expect(texts[0]).To(HavePrefix("SUMMARY:"))
		Expect(texts).NotTo(ContainElement(long("u1")))
		Expect(texts[len(texts)-1]).To(Equal("again"))
		b.finish()
	})

	It("compacts on demand with /compact, keeping the last turn", func() {
		fake.Script(llmtest.Reply{Text: "a1"}, llmtest.Reply{Text: "a2"},
			llmtest.Reply{Text: "SUMMARY of turn one"}, llmtest.Reply{Text: "a3"})
		a := start()
		sid := a.newSession(cwd)
		a.result(a.prompt(sid, "u1"))
		a.result(a.prompt(sid, "u2"))
		from := a.mark()
		p := a.prompt(sid, "/compact")
		Expect(a.result(p)["stopReason"]).To(Equal("end_turn"))
		Expect(chatText(a.sessionUpdates(sid, from, p), "agent_message_chunk")).To(MatchRegexp(`^Context compacted: \d+ → \d+ tokens$`))
		summaryCall := chatTexts(fake.Requests()[2])
		Expect(summaryCall).To(HaveLen(3))
		Expect(summaryCall[:2]).To(Equal([]string{"u1", "a1"}))
		Expect(summaryCall[2]).To(ContainSubstring("Summarize"))
		a.result(a.prompt(sid, "u3"))
		Expect(chatTexts(lastRequest(fake))).To(Equal([]string{"SUMMARY of turn one", "u2", "a2", "u3"}))

		// /clear starts over without a model call; the history stays on disk
		calls := len(fake.Requests())
		from = a.mark()
		p = a.prompt(sid, "/clear")
		Expect(a.result(p)["stopReason"]).To(Equal("end_turn"))
		Expect(chatText(a.sessionUpdates(sid, from, p), "agent_message_chunk")).To(Equal("Context cleared."))
		Expect(fake.Requests()).To(HaveLen(calls))
		a.result(a.prompt(sid, "u4"))
		texts := chatTexts(lastRequest(fake))
		Expect(texts).To(HaveLen(2))
		Expect(texts[0]).To(ContainSubstring("cleared"))
		Expect(texts[1]).To(Equal("u4"))
		// a load still replays every turn (slash commands are not messages)
		from = a.mark()
		load := a.request("session/load", loadParams(sid, cwd))
		a.result(load)
		Expect(chatText(a.sessionUpdates(sid, from, load), "user_message_chunk")).To(Equal("u1u2u3u4"))
		a.finish()
	})

	It("evicts an idle session and restores it transparently on the next request", func() {
		fake.Script(llmtest.Reply{Text: "one"}, llmtest.Reply{Text: "two"})
		a := start("IAC_CODE_SESSION_IDLE=200ms")
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "first"))["stopReason"]).To(Equal("end_turn"))
		Eventually(a.stderr.String, 20*time.Second, 50*time.Millisecond).Should(ContainSubstring("idle session evicted from memory"))
		Expect(a.result(a.prompt(sid, "second"))["stopReason"]).To(Equal("end_turn"))
		Expect(chatTexts(lastRequest(fake))).To(Equal([]string{"first", "one", "second"}))
		// evicted again: other requests restore it too
		Eventually(func() int { return strings.Count(a.stderr.String(), "idle session evicted from memory") },
			20*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 2))
		Expect(a.result(a.request("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"}))).To(BeEmpty())
		a.finish()
		Expect(readMeta(home, sid)).To(HaveKeyWithValue("mode", "plan"))
	})

	It("closes a session: memory only; its history stays and a later load works (also right away)", func() {
		fake.Script(llmtest.Reply{Text: "kept"})
		a := start()
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "keep me"))["stopReason"]).To(Equal("end_turn"))
		// load of the live session replays too
		from := a.mark()
		load := a.request("session/load", loadParams(sid, cwd))
		a.result(load)
		Expect(mergeUpdates(a.sessionUpdates(sid, from, load))).To(HaveLen(2))
		// close and load without waiting for the close's answer
		closeID := a.request("session/close", map[string]any{"sessionId": sid})
		load = a.request("session/load", loadParams(sid, cwd))
		Expect(a.result(closeID)).To(BeEmpty())
		a.result(load)
		Expect(mergeUpdates(a.sessionUpdates(sid, a.responseIndex(closeID), load))).To(Equal([]map[string]any{
			{"sessionUpdate": "user_message_chunk", "text": "keep me"},
			{"sessionUpdate": "agent_message_chunk", "text": "kept"},
		}))
		Expect(historyPath(home, sid)).To(BeAnExistingFile())
		Expect(a.result(a.prompt(sid, "still here?"))["stopReason"]).To(Equal("end_turn"))
		a.finish()
	})

	It("answers unknown session ids with -32002 Session not found, data.sessionId naming it", func() {
		a := start()
		for _, c := range []struct {
			method string
			params map[string]any
		}{
			{"session/load", loadParams("no-such-session", cwd)},
			{"session/load", loadParams("../../etc", cwd)},
			{"session/resume", map[string]any{"sessionId": "no-such-session", "cwd": cwd}},
			{"session/prompt", map[string]any{"sessionId": "no-such-session", "prompt": []any{map[string]any{"type": "text", "text": "x"}}}},
			{"session/close", map[string]any{"sessionId": "no-such-session"}},
			{"session/set_mode", map[string]any{"sessionId": "no-such-session", "modeId": "plan"}},
			{"config/set", map[string]any{"sessionId": "no-such-session", "configId": "mode", "value": "plan"}},
			{"session/set_config_option", map[string]any{"sessionId": "no-such-session", "configId": "mode", "value": "plan"}},
		} {
			e := a.errorOf(a.request(c.method, c.params))
			Expect(e["code"]).To(Equal(-32002.0), c.method)
			Expect(e["data"]).To(Equal(map[string]any{"sessionId": c.params["sessionId"], "session_id": "Session not found"}), c.method)
		}
		e := a.errorOf(a.requestChecked("session/fork", "session/new", loadParams("no-such-session", cwd)))
		Expect(e["code"]).To(Equal(-32002.0))
		Expect(e["data"]).To(Equal(map[string]any{"sessionId": "no-such-session", "session_id": "Session not found"}))
		// and the connection still works
		sid := a.newSession(cwd)
		Expect(a.result(a.prompt(sid, "fine"))["stopReason"]).To(Equal("end_turn"))
		a.finish()
	})
})

// chatText joins the text of the chunks of one kind.
func chatText(updates []map[string]any, kind string) string {
	var b strings.Builder
	for _, u := range updates {
		if u["sessionUpdate"] == kind {
			b.WriteString(u["content"].(map[string]any)["text"].(string))
		}
	}
	return b.String()
}
