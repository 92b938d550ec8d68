package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

var _ = Describe("cluster mode: pods behind a round-robin load balancer", Label("e2e", "cluster", "postgres", "http"), func() {
	var (
		fake *llmtest.Server
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
	})

	It("runs the spec's curl workflow through the proxy: permission, a stream reconnect on another pod, cancel, delete", func() {
		fake.Script(
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_w", Name: "write_file",
				Arguments: `{"path":"hello.txt","content":"hi there"}`}}},
			llmtest.Reply{Text: "I wrote hello.txt for you."},
			llmtest.Reply{Text: "one two three four", Hang: true, AfterChunks: 3},
		)
		cl := newCluster(fake, 3)
		lb := newRoundRobin(cl.pods)

		By("initialize lands on one pod; every later request goes to the next one")
		r := lb.post("", jrpc(1, "initialize", map[string]any{"protocolVersion": 1}))
		Expect(r.status).To(Equal(http.StatusOK))
		lb.check.ServerSent(r.body)
		conn := r.header.Get("Acp-Connection-Id")
		owner := lb.lastServed()
		Expect(conn).To(HavePrefix(cl.pods[owner].incarnation() + "."))
		s := lb.stream(conn)
		Expect(lb.lastServed()).NotTo(Equal(owner), "the stream is on another pod")

		lb.accepted(conn, jrpc(2, "session/new", map[string]any{"cwd": cwd}))
		evs := s.until("session/new response", respTo(2))
		sid := evs[len(evs)-1].msg["result"].(map[string]any)["sessionId"].(string)

		lb.accepted(conn, jrpc(3, "session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": "Write hello.txt"}}}))
		perm := s.until("permission request", methodIs("session/request_permission"))
		evs = append(evs, perm...)
		req := perm[len(perm)-1].msg

		By("the client drops its stream and reconnects with Last-Event-ID: the proxy sends it to another pod")
		lastSeen := evs[len(evs)-1].id
		s.cancel()
		s.waitEOF()
		first := lb.lastServed()
		s2 := lb.stream(conn, "Last-Event-ID", lastSeen)
		Expect(lb.lastServed()).NotTo(Equal(first))

		lb.accepted(conn, map[string]any{"jsonrpc": "2.0", "id": req["id"],
			"result": map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}}})
		rest := s2.until("prompt response", respTo(3))
		Expect(rest[len(rest)-1].msg["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		content, err := os.ReadFile(filepath.Join(cwd, "hello.txt"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(content)).To(Equal("hi there"))

		By("nothing lost, nothing duplicated: ids 1, 2, 3… over both streams")
		all := append(evs, rest...)
		for i, ev := range all {
			Expect(ev.id).To(Equal(strconv.Itoa(i+1)), "event %d", i)
		}

		By("a prompt cancelled through yet another pod")
		lb.accepted(conn, jrpc(4, "session/prompt", map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": "count"}}}))
		s2.until("first chunk", isAgentChunk)
		lb.accepted(conn, jrpc(nil, "session/cancel", map[string]any{"sessionId": sid}))
		done := s2.until("cancelled prompt", respTo(4))
		Expect(done[len(done)-1].msg["result"]).To(HaveKeyWithValue("stopReason", "cancelled"))

		By("DELETE through the proxy ends the stream; the id is unknown everywhere afterwards")
		Expect(lb.do(http.MethodDelete, nil, "Acp-Connection-Id", conn).status).To(Equal(http.StatusOK))
		s2.waitEOF()
		for _, p := range cl.pods {
			r := p.post(conn, jrpc(9, "session/list", map[string]any{}))
			Expect(r.status).To(Equal(http.StatusBadRequest))
			Expect(string(r.body)).To(ContainSubstring("Connection not found"))
		}
		By("an id naming no pod at all is not found either")
		r = lb.post("00000000-0000-4000-8000-000000000000."+strings.Split(conn, ".")[1], jrpc(9, "session/list", map[string]any{}))
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(string(r.body)).To(ContainSubstring("Connection not found"))
		Expect(lb.check.Violations()).To(BeEmpty(), "schema violations")

		By("the pods counted forwarded requests, remote streams and their hops")
		var forwarded, attaches, hops float64
		for _, p := range cl.pods {
			forwarded += p.metric(`iaccode_cluster_forwarded_total{kind="post"}`)
			attaches += p.metric("iaccode_cluster_remote_stream_attaches_total")
			hops += p.metric(`iaccode_cluster_hop_seconds_count{kind="post"}`)
		}
		Expect(forwarded).To(BeNumerically(">=", 4))
		Expect(attaches).To(BeNumerically(">=", 2))
		Expect(hops).To(Equal(forwarded))
		for _, p := range cl.pods {
			p.sigterm(10 * time.Second)
			Expect(p.stderr.String()).NotTo(ContainSubstring(clusterSecret))
		}
	})

	It("serves the official TypeScript SDK HTTP client through the proxy: permissions, cancel, load of a session another pod created", Label("node"), func() {
		fake.Script(
			llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_w", Name: "write_file",
				Arguments: `{"path":"ts.txt","content":"from ts"}`}}},
			llmtest.Reply{Text: "Done writing."},
			llmtest.Reply{Text: "one two three four", Hang: true, AfterChunks: 3},
			llmtest.Reply{Text: "fresh"},
			llmtest.Reply{Text: "Loaded fine."},
		)
		cl := newCluster(fake, 3)
		lb := newRoundRobin(cl.pods)
		args := func(scenario string, extra ...string) []string {
			return append([]string{"--transport", "http", "--http-url", lb.base + "/acp", "--scenario", scenario, "--cwd", cwd}, extra...)
		}
		run := runTSClient(agentEnv(fake), args("permission")...)
		Expect(run.Result["prompts"].([]any)[0]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(run.PermissionRequests).To(HaveLen(1))
		Expect(chunkText(run.Updates, "agent_message_chunk")).To(Equal("Done writing."))
		content, err := os.ReadFile(filepath.Join(cwd, "ts.txt"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(content)).To(Equal("from ts"))
		sid := run.Result["sessionId"].(string)

		run = runTSClient(agentEnv(fake), args("cancel")...)
		Expect(run.Result["first"]).To(HaveKeyWithValue("stopReason", "cancelled"))
		Expect(run.Result["second"]).To(HaveKeyWithValue("stopReason", "end_turn"))

		run = runTSClient(agentEnv(fake), args("load", "--session-id", sid, "--text", "still there?")...)
		Expect(run.Result["prompt"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		var replayed []map[string]any
		for _, u := range run.Result["replayed"].([]any) {
			replayed = append(replayed, u.(map[string]any))
		}
		Expect(chunkText(replayed, "agent_message_chunk")).To(Equal("Done writing."))
		Expect(chatTexts(lastRequest(fake))).To(ContainElement("still there?"))
		var attaches float64
		for _, p := range cl.pods {
			attaches += p.metric("iaccode_cluster_remote_stream_attaches_total")
		}
		Expect(attaches).To(BeNumerically(">", 0), "some streams were served by another pod")
	})

	It("moves sessions between pods (IAC_CODE_SESSION_ATTACH=move): list everywhere, load elsewhere hands over, racing loads end with one owner", func() {
		fake.Script(llmtest.Reply{Text: "Noted: 42."}, llmtest.Reply{Text: "a b c d e f", Hang: true, AfterChunks: 3},
			llmtest.Reply{Text: "It was 42."})
		cl := newCluster(fake, 3, "IAC_CODE_SESSION_ATTACH=move")
		a, b, c := openConn(cl.pods[0]), openConn(cl.pods[1]), openConn(cl.pods[2])
		sid := a.newSession(cwd)
		Expect(a.wait(a.prompt(sid, "Remember 42"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))

		By("session/list on another pod reads the shared store")
		list := b.result("session/list", map[string]any{"cwd": cwd})
		Expect(list["sessions"]).To(ConsistOf(HaveKeyWithValue("sessionId", sid)))

		By("a load on pod C while pod A runs a prompt in the session: A's prompt ends cancelled, C has the session")
		running := a.prompt(sid, "count slowly")
		a.s.until("first chunk", isAgentChunk)
		from := len(c.events)
		Expect(c.result("session/load", loadParams(sid, cwd))).To(HaveKey("modes"))
		Expect(a.wait(running)["result"]).To(HaveKeyWithValue("stopReason", "cancelled"))
		Expect(chatText(c.updatesOf(sid, from), "user_message_chunk")).To(Equal("Remember 42count slowly"))
		Expect(chatText(c.updatesOf(sid, from), "agent_message_chunk")).To(HavePrefix("Noted: 42."))
		Expect(cl.pods[2].metric("iaccode_cluster_handovers_total")).To(Equal(1.0))
		moved := a.call("session/prompt", map[string]any{"sessionId": sid, "prompt": []any{map[string]any{"type": "text", "text": "mine?"}}})
		Expect(moved["error"]).To(HaveKeyWithValue("data", HaveKeyWithValue("session_id", "Session moved to another connection")), "%v", moved)
		Expect(c.wait(c.prompt(sid, "what was it?"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		texts := chatTexts(lastRequest(fake))
		Expect(texts[:3]).To(Equal([]string{"Remember 42", "Noted: 42.", "count slowly"}))
		Expect(texts[len(texts)-1]).To(Equal("what was it?"))
		Expect(texts).NotTo(ContainElement("mine?"))

		By("two clients on pods A and B load it at once, then both prompt: one owner, one turn")
		fake.Script(llmtest.Reply{Text: "one winner"}, llmtest.Reply{Text: "two winners"})
		la, lb := a.send("session/load", loadParams(sid, cwd)), b.send("session/load", loadParams(sid, cwd))
		a.wait(la)
		b.wait(lb)
		pa, pb := a.prompt(sid, "from A"), b.prompt(sid, "from B")
		ra, rb := a.wait(pa), b.wait(pb)
		ends := 0
		for _, r := range []map[string]any{ra, rb} {
			if res, ok := r["result"].(map[string]any); ok && res["stopReason"] == "end_turn" {
				ends++
			} else {
				Expect(r).To(HaveKey("error"), "the other prompt is refused")
			}
		}
		Expect(ends).To(Equal(1), "exactly one prompt ran: %v / %v", ra, rb)

		By("the history has that one turn, nothing interleaved")
		d := openConn(cl.pods[2])
		from = len(d.events)
		d.result("session/load", loadParams(sid, cwd))
		var users []string
		for _, u := range d.updatesOf(sid, from) {
			if u["sessionUpdate"] == "user_message_chunk" {
				users = append(users, u["content"].(map[string]any)["text"].(string))
			}
		}
		Expect(users).To(HaveLen(4))
		Expect(users[:3]).To(Equal([]string{"Remember 42", "count slowly", "what was it?"}))
		Expect(users[3]).To(BeElementOf("from A", "from B"))
		Expect(chatText(d.updatesOf(sid, from), "agent_message_chunk")).To(And(HavePrefix("Noted: 42."), HaveSuffix("It was 42.one winner")))
		for _, conn := range []*acpConn{a, b, c, d} {
			Expect(conn.via.check.Violations()).To(BeEmpty())
		}
	})

	It("after kill -9 of the pod owning a connection mid-turn: 'Connection not found' at once, re-initialize, a survivor resumes the turn at once, a load on a survivor sees it", func() {
		fake.Script(llmtest.Reply{Text: "Noted: 42."}, llmtest.Reply{Text: "a b c d e f", Hang: true, AfterChunks: 3},
			llmtest.Reply{Text: "Back: 42."}, llmtest.Reply{Text: "Still here."})
		cl := newCluster(fake, 3)
		lb := newRoundRobin(cl.pods)
		c := openConn(lb.httpAgent)
		owner := cl.pods[lb.served[0]]
		sid := c.newSession(cwd)
		Expect(c.wait(c.prompt(sid, "Remember 42"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		pending := c.prompt(sid, "count slowly")
		c.s.until("first chunk", isAgentChunk)
		Expect(lb.served[1]).NotTo(Equal(lb.served[0]), "the stream is on another pod than the connection")

		killed := time.Now()
		Expect(owner.cmd.Process.Kill()).To(Succeed())
		<-owner.exited
		r := lb.post(c.id, jrpc(50, "session/list", map[string]any{}))
		took := time.Since(killed)
		Expect(r.status).To(Equal(http.StatusBadRequest))
		Expect(string(r.body)).To(ContainSubstring("Connection not found"))
		Expect(took).To(BeNumerically("<", 500*time.Millisecond))
		GinkgoWriter.Printf("kill -9 → 400 Connection not found in %v\n", took)
		By("the survivor serving the stream answers the pending prompt by its own id, then ends the stream")
		end := c.s.rest()
		var answers []map[string]any
		for _, ev := range end {
			if ev.msg["method"] == nil {
				Expect(ev.msg["id"]).NotTo(BeNil(), "an answer with id null: %v", ev.lines)
				answers = append(answers, ev.msg)
			}
		}
		Expect(answers).To(HaveLen(1))
		Expect(answers[0]["id"]).To(Equal(pending))
		Expect(answers[0]["error"]).To(HaveKeyWithValue("code", -32603.0))
		Expect(answers[0]["error"]).To(HaveKeyWithValue("data", HaveKeyWithValue("reason", "connection_lost")))

		By("a survivor's recovery scan resumes the turn cut by the kill at once, its reply asked again; a new connection loads the session")
		Eventually(fake.Requests, 5*time.Second, 20*time.Millisecond).Should(HaveLen(3), "the resumed turn asked the model, before any load")
		n := openConn(lb.httpAgent)
		from := len(n.events)
		n.result("session/load", loadParams(sid, cwd))
		Expect(chatText(n.updatesOf(sid, from), "user_message_chunk")).To(Equal("Remember 42count slowly"))
		Expect(n.wait(n.prompt(sid, "still there?"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"), "queued behind the resumed turn")
		Expect(chatText(n.updatesOf(sid, from), "agent_message_chunk")).To(Equal("Noted: 42.Back: 42.Still here."),
			"the cut reply (never recorded) asked again, each chunk once")
		Expect(fake.Requests()).To(HaveLen(4), "one model request per reply: none repeated")
		Expect(lb.check.Violations()).To(BeEmpty())
	})

	It("takes a session over once the lease of a stalled pod expires; the stalled pod's late writes are refused", func() {
		fake.Script(llmtest.Reply{Text: "Noted: 42."}, llmtest.Reply{Text: "a b c d e f", Hang: true, AfterChunks: 3},
			llmtest.Reply{Text: "Took over."}, llmtest.Reply{Text: "And now."})
		cl := newCluster(fake, 2, "IAC_CODE_LEASE_TTL=1s", "IAC_CODE_LEASE_RENEW=200ms")
		a, b := openConn(cl.pods[0]), openConn(cl.pods[1])
		sid := a.newSession(cwd)
		Expect(a.wait(a.prompt(sid, "Remember 42"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		turn := a.prompt(sid, "count slowly")
		a.s.until("first chunk", isAgentChunk)
		stopped := time.Now()
		DeferCleanup(func() { _ = cl.pods[0].cmd.Process.Signal(syscall.SIGCONT) })
		cl.pods[0].freeze() // from here on pod A runs not one more instruction until SIGCONT

		e := b.call("session/load", loadParams(sid, cwd))
		Expect(e["error"]).To(HaveKeyWithValue("code", -32010.0), "pod A's lease still runs")
		Expect(e["error"]).To(HaveKeyWithValue("data", HaveKeyWithValue("incarnation", cl.pods[0].incarnation())))
		Eventually(func() map[string]any {
			return b.call("session/load", loadParams(sid, cwd))
		}, 10*time.Second, 200*time.Millisecond).Should(HaveKey("result"), "loaded once A's lease expired")
		GinkgoWriter.Printf("stalled pod's session taken over after %v\n", time.Since(stopped))
		Expect(cl.pods[1].metric("iaccode_cluster_lease_takeovers_total")).To(BeNumerically(">=", 1))
		Expect(b.wait(b.prompt(sid, "and now?"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))

		By("pod A wakes up: its turn's answer says the session was taken over, nothing of it is saved")
		Expect(cl.pods[0].cmd.Process.Signal(syscall.SIGCONT)).To(Succeed())
		a.send("session/cancel", map[string]any{"sessionId": sid})
		late := a.wait(turn)
		Expect(late["error"]).To(HaveKeyWithValue("code", -32010.0))
		Expect(late["error"]).To(HaveKeyWithValue("data", HaveKeyWithValue("reason", "session_taken_over")))
		d := openConn(cl.pods[1])
		from := len(d.events)
		d.result("session/load", loadParams(sid, cwd))
		Expect(chatText(d.updatesOf(sid, from), "user_message_chunk")).To(Equal("Remember 42count slowlyand now?"))
		Expect(chatText(d.updatesOf(sid, from), "agent_message_chunk")).To(Equal("Noted: 42.Took over.And now."),
			"B resumed the cut turn (its reply asked again) before the prompt queued behind it")
	})

	DescribeTable("SIGTERM of the pod a prompt was sent to: its turn goes on at another pod, and the answer reaches the connection that sent it, moved",
		func(pods int) {
			steps := filepath.Join(cwd, "steps")
			script := []llmtest.Reply{{Text: "Noted."}}
			var want []string
			for i := 1; i <= 6; i++ {
				line := "s" + strconv.Itoa(i)
				want = append(want, line)
				script = append(script, toolCallReply(line, "bash", map[string]any{"command": "echo " + line + " >> " + steps + "; sleep 0.4"}))
			}
			fake.Script(append(script, llmtest.Reply{Text: "All six steps done."}, llmtest.Reply{Text: "Here."})...)
			cl := newCluster(fake, pods, "IAC_CODE_DRAIN_TIMEOUT=5s")
			rr := newRoundRobin(cl.pods)
			c := openConn(cl.pods[0]) // its id, its session and its prompt: all pod 0's
			sid := c.newSession(cwd)
			Expect(c.wait(c.prompt(sid, "Remember 42"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
			c.result("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"})
			from := len(c.events)
			turn := c.prompt(sid, "run the six steps")
			c.until("the second step running", func(m map[string]any) bool {
				u, _ := m["params"].(map[string]any)["update"].(map[string]any)
				return m["method"] == "session/update" && u["toolCallId"] == "s2" && u["status"] == "in_progress"
			})

			Expect(cl.pods[0].cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
			c.events = append(c.events, c.s.rest()...) // the stream ends: the connection moved
			last := c.events[len(c.events)-1].id
			Expect(last).NotTo(BeEmpty())

			By("the client reconnects through the load balancer with Last-Event-ID")
			c.s = reconnect(rr.httpAgent, c.id, last)
			c.via = rr.httpAgent
			Expect(c.wait(turn)["result"]).To(HaveKeyWithValue("stopReason", "end_turn"), "answered by the adopter's resumed turn")
			data, err := os.ReadFile(steps)
			Expect(err).NotTo(HaveOccurred())
			Expect(strings.Fields(string(data))).To(Equal(want), "every step once, in order")
			ups := c.updatesOf(sid, from)
			for _, id := range want {
				var kinds []string
				for _, u := range toolUpdates(ups, id) {
					k, _ := u["sessionUpdate"].(string)
					if st, ok := u["status"].(string); ok {
						k += ":" + st
					}
					kinds = append(kinds, k)
				}
				Expect(kinds).To(Equal([]string{"tool_call:pending", "tool_call_update:in_progress", "tool_call_update:completed"}),
					"step %s: each of its updates once, in order", id)
			}
			Expect(chatText(ups, "agent_message_chunk")).To(Equal("All six steps done."))
			prev := 0
			for _, ev := range c.events {
				if ev.id == "" {
					continue
				}
				n, err := strconv.Atoi(ev.id)
				Expect(err).NotTo(HaveOccurred())
				Expect(n).To(BeNumerically(">", prev), "event ids increase over both streams: none repeated")
				prev = n
			}
			Expect(cl.pods[0].stderr.String()).To(ContainSubstring("the session's clients on this pod follow it to its next holder"))
			Eventually(cl.pods[0].exited, 15*time.Second).Should(Receive())

			By("the connection goes on without initialize, through any pod")
			for range 3 {
				Expect(c.call("session/list", map[string]any{})).To(HaveKey("result"))
			}
			Expect(c.wait(c.prompt(sid, "there?"))).To(HaveKey("result"))
			for _, p := range cl.pods[1:] {
				Expect(p.check.Violations()).To(BeEmpty())
			}
		},
		Entry("three pods", 3),
		Entry("two pods: the connection moves to the pod that adopted its session", 2),
	)

	It("SIGTERM of a pod serving another pod's stream: the stream ends at once, a reconnect elsewhere resumes it", func() {
		fake.Script(llmtest.Reply{Text: "First."}, llmtest.Reply{Text: "Second."})
		cl := newCluster(fake, 2)
		a := openConn(cl.pods[0], cl.pods[1]) // owned by A, streamed by B
		sid := a.newSession(cwd)
		Expect(a.wait(a.prompt(sid, "one"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		last := a.events[len(a.events)-1].id

		stopped := time.Now()
		Expect(cl.pods[1].cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
		a.s.waitEOF()
		Expect(time.Since(stopped)).To(BeNumerically("<", 2*time.Second))
		Eventually(cl.pods[1].exited, 10*time.Second).Should(Receive(BeNil()))

		a.s = cl.pods[0].stream(a.id, "Last-Event-ID", last)
		from := len(a.events)
		Expect(a.wait(a.prompt(sid, "two"))["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(chatText(a.updatesOf(sid, from), "agent_message_chunk")).To(Equal("Second."))
		for i, ev := range a.events {
			Expect(ev.id).To(Equal(strconv.Itoa(i+1)), "ids 1..n over both streams: none lost or repeated")
		}
	})

	It("refuses a pod that does not hold the cluster secret", func() {
		cl := newCluster(fake, 1)
		a := openConn(cl.pods[0])
		intruder := cl.start("not-the-secret")
		Eventually(cl.pods[0].stderr.String, 10*time.Second, 50*time.Millisecond).Should(
			ContainSubstring("cluster: refused a connection that does not hold the cluster secret"))
		Expect(cl.pods[0].metric("iaccode_cluster_refused_total")).To(BeNumerically(">", 0))
		r := intruder.post(a.id, jrpc(9, "session/list", map[string]any{}))
		Expect(r.status).NotTo(Equal(http.StatusAccepted), "the intruder cannot reach A's connection: %s", r.body)
		Expect(cl.pods[0].stderr.String()).NotTo(ContainSubstring("not-the-secret"))
		Expect(intruder.stderr.String()).NotTo(ContainSubstring("not-the-secret"))
	})
})

var _ = Describe("cluster mode configuration", Label("e2e", "cluster"), func() {
	It("refuses to start without a shared store, without the secret, or over stdio", func() {
		for _, tc := range []struct {
			args []string
			env  []string
			want string
		}{
			{[]string{"acp", "--transport", "http", "--port", "0", "--cluster-listen", "127.0.0.1:0"},
				[]string{"IAC_CODE_CLUSTER_SECRET=x"}, "cluster mode needs a session store shared by every pod: set IAC_CODE_STORE_URL"},
			{[]string{"acp", "--transport", "http", "--port", "0", "--cluster-listen", "127.0.0.1:0"},
				[]string{"IAC_CODE_STORE_URL=postgres://u@127.0.0.1:1/db"}, "cluster mode needs the cluster secret: set IAC_CODE_CLUSTER_SECRET"},
			{[]string{"acp", "--cluster-listen", "127.0.0.1:0"}, nil, "cluster mode (--cluster-listen, IAC_CODE_CLUSTER_LISTEN) needs --transport http"},
		} {
			cmd := exec.Command(binPath, tc.args...)
			cmd.Env = append(os.Environ(), append(tc.env, "IAC_CODE_HOME="+GinkgoT().TempDir())...)
			out, err := cmd.CombinedOutput()
			Expect(err).To(HaveOccurred(), string(out))
			Expect(string(out)).To(ContainSubstring(tc.want))
		}
	})
})
