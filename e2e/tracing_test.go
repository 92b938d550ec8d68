package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// The client's span every turn of these specs is parented to.
const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	clientTP      = "00-" + clientTraceID + "-" + clientSpanID + "-01"
	// Texts that must not reach a span unless content capture is on.
	promptSecret = "prompt-text-9127"
	fileSecret   = "file-content-4411"
)

// OpenTelemetry span kinds (OTLP numbering).
const (
	spanInternal = 1
	spanClient   = 3
)

var _ = Describe("OpenTelemetry traces", Label("e2e", "tracing"), func() {
	var (
		fake *llmtest.Server
		rcv  *otlpReceiver
		cwd  string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		rcv = startOTLPReceiver()
		cwd = GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(cwd, "notes.txt"), []byte(fileSecret+"\n"), 0o600)).To(Succeed())
	})
	// A turn with one tool call: read_file (no permission needed), then
	// the answer.
	scriptTurn := func() {
		read := toolCallReply("call_r1", "read_file", map[string]any{"path": "notes.txt"})
		read.Usage = &llmtest.Usage{PromptTokens: 120, CompletionTokens: 7}
		fake.Script(read, llmtest.Reply{Text: "it says so", Usage: &llmtest.Usage{PromptTokens: 150, CompletionTokens: 3}})
	}
	otelEnv := func(endpoint, protocol string, extra ...string) []string {
		return append([]string{"IAC_CODE_PROVIDER=openai", "OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
			"OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol, "OTEL_SERVICE_NAME=iac-code-e2e",
			"OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=e2e", "OTEL_BSP_SCHEDULE_DELAY=100"}, extra...)
	}
	promptParams := func(sid string, meta map[string]any) map[string]any {
		p := map[string]any{"sessionId": sid,
			"prompt": []any{map[string]any{"type": "text", "text": promptSecret + ": what do the notes say?"}}}
		if meta != nil {
			p["_meta"] = meta
		}
		return p
	}
	// turnSpans waits for the turn's three kinds of spans and returns them.
	turnSpans := func() (turn, chat1, chat2, tool otlpSpan) {
		var spans []otlpSpan
		Eventually(func() int {
			spans = rcv.Spans()
			return len(spans)
		}, 20*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 4), "spans received")
		var chats []otlpSpan
		for _, s := range spans {
			switch {
			case s.Name == "invoke_agent":
				turn = s
			case s.Name == "chat test-model":
				chats = append(chats, s)
			case s.Name == "execute_tool read_file":
				tool = s
			}
		}
		Expect(turn.Name).NotTo(BeEmpty(), "an invoke_agent span in %v", spans)
		Expect(tool.Name).NotTo(BeEmpty(), "an execute_tool span in %v", spans)
		Expect(chats).To(HaveLen(2))
		return turn, chats[0], chats[1], tool
	}
	// expectTurnTrace checks the spans of the scripted turn of session sid
	// of principal who, under the client's span.
	expectTurnTrace := func(sid, who string) {
		turn, chat1, chat2, tool := turnSpans()
		for _, s := range []otlpSpan{turn, chat1, chat2, tool} {
			Expect(s.TraceID).To(Equal(clientTraceID), s.Name+": one trace, the client's")
			Expect(s.Attrs).To(HaveKeyWithValue("gen_ai.conversation.id", sid), s.Name)
			Expect(s.Resource).To(HaveKeyWithValue("service.name", "iac-code-e2e"))
			Expect(s.Resource).To(HaveKeyWithValue("deployment.environment.name", "e2e"))
			Expect(s.StatusError).To(BeFalse(), s.Name)
		}
		Expect(turn.ParentID).To(Equal(clientSpanID), "the turn is a child of the client's traceparent")
		Expect(turn.Kind).To(BeEquivalentTo(spanInternal))
		Expect(turn.Attrs).To(And(HaveKeyWithValue("gen_ai.operation.name", "invoke_agent"),
			HaveKeyWithValue("gen_ai.request.model", "test-model"), HaveKeyWithValue("enduser.id", who),
			HaveKeyWithValue("gen_ai.usage.input_tokens", int64(270)), HaveKeyWithValue("gen_ai.usage.output_tokens", int64(10)),
			HaveKeyWithValue("gen_ai.response.finish_reasons", []any{"end_turn"})))
		for _, c := range []otlpSpan{chat1, chat2} {
			Expect(c.ParentID).To(Equal(turn.SpanID), "model calls are children of the turn")
			Expect(c.Kind).To(BeEquivalentTo(spanClient))
			Expect(c.Attrs).To(And(HaveKeyWithValue("gen_ai.operation.name", "chat"),
				HaveKeyWithValue("gen_ai.provider.name", "openai"), HaveKeyWithValue("gen_ai.request.model", "test-model")))
		}
		Expect(chat1.Attrs).To(And(HaveKeyWithValue("gen_ai.usage.input_tokens", int64(120)),
			HaveKeyWithValue("gen_ai.usage.output_tokens", int64(7)), HaveKeyWithValue("gen_ai.response.finish_reasons", []any{"tool_use"})))
		Expect(chat2.Attrs).To(And(HaveKeyWithValue("gen_ai.usage.input_tokens", int64(150)),
			HaveKeyWithValue("gen_ai.usage.output_tokens", int64(3)), HaveKeyWithValue("gen_ai.response.finish_reasons", []any{"end_turn"})))
		Expect(tool.ParentID).To(Equal(turn.SpanID), "the tool call is a child of the turn")
		Expect(tool.Attrs).To(And(HaveKeyWithValue("gen_ai.operation.name", "execute_tool"),
			HaveKeyWithValue("gen_ai.tool.name", "read_file"), HaveKeyWithValue("gen_ai.tool.call.id", "call_r1")))
	}
	// expectNoContent: no attribute anywhere holds the prompt, the tool's
	// arguments or its result.
	expectNoContent := func() {
		for _, s := range rcv.Spans() {
			b, _ := json.Marshal(s.Attrs)
			Expect(string(b)).NotTo(ContainSubstring(promptSecret), s.Name)
			Expect(string(b)).NotTo(ContainSubstring(fileSecret), s.Name)
			Expect(string(b)).NotTo(ContainSubstring("notes.txt"), s.Name)
		}
	}

	It("exports a turn with a tool call over http/protobuf as one trace under the client's _meta traceparent, without content", func() {
		scriptTurn()
		a := startAgent(agentEnv(fake, otelEnv(rcv.URL, "http/protobuf")...))
		a.initialize()
		sid := a.newSession(cwd)
		id := a.request("session/prompt", promptParams(sid, map[string]any{"traceparent": clientTP}))
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		expectTurnTrace(sid, "default")
		expectNoContent()
		a.finish()
	})

	It("exports over grpc, and with IAC_CODE_OTEL_CAPTURE_CONTENT=true the prompt, tool arguments and result", func() {
		scriptTurn()
		a := startAgent(agentEnv(fake, otelEnv(rcv.GRPCURL, "grpc", "IAC_CODE_OTEL_CAPTURE_CONTENT=true")...))
		a.initialize()
		sid := a.newSession(cwd)
		id := a.request("session/prompt", promptParams(sid, map[string]any{"traceparent": clientTP}))
		Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
		expectTurnTrace(sid, "default")
		turn, _, _, tool := turnSpans()
		Expect(turn.Attrs["gen_ai.input.messages"]).To(ContainSubstring(promptSecret))
		Expect(tool.Attrs["gen_ai.tool.call.arguments"]).To(ContainSubstring("notes.txt"))
		Expect(tool.Attrs["gen_ai.tool.call.result"]).To(ContainSubstring(fileSecret))
		a.finish()
	})

	It("exports nothing when no variable asks for traces, or when OTEL_TRACES_EXPORTER=none", func() {
		// Without any variable the SDK's default endpoint would be
		// 127.0.0.1:4318: listen there too when it is free.
		var defaultPort *otlpReceiver
		if ln, err := net.Listen("tcp", "127.0.0.1:4318"); err == nil {
			Expect(ln.Close()).To(Succeed())
			defaultPort = startOTLPReceiverAt("127.0.0.1:4318")
		}
		for _, env := range [][]string{
			{"OTEL_SERVICE_NAME=iac-code-e2e"}, // naming the service alone turns nothing on
			{"OTEL_TRACES_EXPORTER=none", "OTEL_EXPORTER_OTLP_ENDPOINT=" + rcv.URL},
		} {
			scriptTurn()
			a := startAgent(agentEnv(fake, append(env, "IAC_CODE_LOG_LEVEL=info")...))
			a.initialize()
			sid := a.newSession(cwd)
			id := a.request("session/prompt", promptParams(sid, map[string]any{"traceparent": clientTP}))
			Expect(a.result(id)["stopReason"]).To(Equal("end_turn"))
			a.finish() // the exit would flush buffered spans
			Expect(a.stderr.String()).NotTo(ContainSubstring("tracing:"))
		}
		Consistently(rcv.Requests, time.Second).Should(BeZero())
		if defaultPort != nil {
			Expect(defaultPort.Requests()).To(BeZero())
		}
	})

	It("keeps one trace for a turn whose prompt went through another pod (traceparent header carried over the hop)", func() {
		scriptTurn()
		cl := newCluster(fake, 2, otelEnv(rcv.URL, "http/protobuf")...)
		c := openConn(cl.pods[0]) // the connection lives on pod A
		sid := c.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})["result"].(map[string]any)["sessionId"].(string)
		By("the prompt POSTed to pod B, its trace context in the HTTP header only")
		c.nextID++
		body, err := json.Marshal(jrpc(c.nextID, "session/prompt", promptParams(sid, nil)))
		Expect(err).NotTo(HaveOccurred())
		r := cl.pods[1].do(http.MethodPost, body, "Acp-Connection-Id", c.id, "Traceparent", clientTP)
		Expect(r.status).To(Equal(http.StatusAccepted), string(r.body))
		res := c.wait(float64(c.nextID))
		Expect(res["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		Expect(cl.pods[1].metric(`iaccode_cluster_forwarded_total{kind="post"}`)).To(BeNumerically(">=", 1))
		expectTurnTrace(sid, "default")
		expectNoContent()
		for _, s := range rcv.Spans() {
			Expect(s.TraceID).To(Equal(clientTraceID), "no span of another trace: "+s.Name)
		}
	})
})

// startOTLPReceiverAt is startOTLPReceiver's HTTP receiver on addr.
func startOTLPReceiverAt(addr string) *otlpReceiver {
	r := &otlpReceiver{}
	ln, err := net.Listen("tcp", addr)
	Expect(err).NotTo(HaveOccurred())
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.requests++
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = hs.Serve(ln) }()
	DeferCleanup(hs.Close)
	return r
}
