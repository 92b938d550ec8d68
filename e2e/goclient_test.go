package e2e

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"time"

	acp "github.com/coder/acp-go-sdk"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// goProbe is the Go SDK client side: it records updates and answers
// permission requests with a fixed option kind.
type goProbe struct {
	mu      sync.Mutex
	updates []acp.SessionUpdate
	allow   acp.PermissionOptionKind
	asked   int
}

func (p *goProbe) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.updates = append(p.updates, n.Update)
	return nil
}

func (p *goProbe) RequestPermission(_ context.Context, r acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	p.mu.Lock()
	p.asked++
	p.mu.Unlock()
	for _, o := range r.Options {
		if o.Kind == p.allow {
			return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
				Selected: &acp.RequestPermissionOutcomeSelected{OptionId: o.OptionId}}}, nil
		}
	}
	return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}, nil
}

func (p *goProbe) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, acp.NewMethodNotFound("fs/read_text_file")
}
func (p *goProbe) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, acp.NewMethodNotFound("fs/write_text_file")
}
func (p *goProbe) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, acp.NewMethodNotFound("terminal/create")
}
func (p *goProbe) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, acp.NewMethodNotFound("terminal/kill")
}
func (p *goProbe) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, acp.NewMethodNotFound("terminal/output")
}
func (p *goProbe) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, acp.NewMethodNotFound("terminal/release")
}
func (p *goProbe) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, acp.NewMethodNotFound("terminal/wait_for_exit")
}

func (p *goProbe) text(kind string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, u := range p.updates {
		switch {
		case kind == "message" && u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil:
			b.WriteString(u.AgentMessageChunk.Content.Text.Text)
		case kind == "thought" && u.AgentThoughtChunk != nil && u.AgentThoughtChunk.Content.Text != nil:
			b.WriteString(u.AgentThoughtChunk.Content.Text.Text)
		}
	}
	return b.String()
}

// lineTap hands every complete line flowing through it to fn.
type lineTap struct {
	r   io.Reader
	buf []byte
	fn  func([]byte)
}

func (t *lineTap) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.buf = append(t.buf, p[:n]...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			break
		}
		t.fn(append([]byte(nil), t.buf[:i]...))
		t.buf = t.buf[i+1:]
	}
	return n, err
}

type lineTapWriter struct {
	w   io.Writer
	buf []byte
	fn  func([]byte)
}

func (t *lineTapWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			break
		}
		t.fn(append([]byte(nil), t.buf[:i]...))
		t.buf = t.buf[i+1:]
	}
	return t.w.Write(p)
}

var _ = Describe("stdio transport with the Go SDK client", Label("e2e"), func() {
	var (
		fake  *llmtest.Server
		probe *goProbe
		conn  *acp.ClientSideConnection
		check *wireChecker
		diag  *syncBuffer
		ctx   context.Context
		cwd   string
	)
	BeforeEach(func() {
		fake = llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd = GinkgoT().TempDir()
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		DeferCleanup(cancel)
		cmd := exec.Command(binPath, "acp")
		cmd.Env = agentEnv(fake)
		cmd.Stderr = GinkgoWriter
		in, err := cmd.StdinPipe()
		Expect(err).NotTo(HaveOccurred())
		out, err := cmd.StdoutPipe()
		Expect(err).NotTo(HaveOccurred())
		Expect(cmd.Start()).To(Succeed())
		DeferCleanup(func() {
			_ = in.Close()
			Expect(cmd.Wait()).To(Succeed())
			Expect(check.Violations()).To(BeEmpty())
			Expect(check.Passed).To(BeNumerically(">", 0))
			Expect(diag.String()).NotTo(ContainSubstring("failed to parse"))
		})
		check = newWireChecker(schemaV1)
		diag = &syncBuffer{}
		probe = &goProbe{allow: acp.PermissionOptionKindAllowOnce}
		conn = acp.NewClientSideConnection(probe,
			&lineTapWriter{w: in, fn: check.ClientSent},
			&lineTap{r: out, fn: check.ServerSent})
		conn.SetLogger(slog.New(slog.NewTextHandler(diag, nil)))
		_, err = conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber})
		Expect(err).NotTo(HaveOccurred())
	})

	It("prompts with thinking and text and gets end_turn", func() {
		fake.Script(llmtest.Reply{Thinking: "reasoning here", Text: "Go SDK answer"})
		s, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
		Expect(err).NotTo(HaveOccurred())
		res, err := conn.Prompt(ctx, acp.PromptRequest{SessionId: s.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("hi")}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.StopReason).To(Equal(acp.StopReasonEndTurn))
		Expect(probe.text("thought")).To(Equal("reasoning here"))
		Expect(probe.text("message")).To(Equal("Go SDK answer"))
	})

	It("cancels a running prompt and gets cancelled, not an error", func() {
		fake.Script(llmtest.Reply{Text: "a b c d e", Hang: true, AfterChunks: 3})
		s, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
		Expect(err).NotTo(HaveOccurred())
		go func() {
			defer GinkgoRecover()
			Eventually(func() string { return probe.text("message") }).ShouldNot(BeEmpty())
			Expect(conn.Cancel(ctx, acp.CancelNotification{SessionId: s.SessionId})).To(Succeed())
		}()
		res, err := conn.Prompt(ctx, acp.PromptRequest{SessionId: s.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("go")}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.StopReason).To(Equal(acp.StopReasonCancelled))
	})

	It("closes a session; the next prompt fails", func() {
		s, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: cwd, McpServers: []acp.McpServer{}})
		Expect(err).NotTo(HaveOccurred())
		_, err = conn.CloseSession(ctx, acp.CloseSessionRequest{SessionId: s.SessionId})
		Expect(err).NotTo(HaveOccurred())
		_, err = conn.Prompt(ctx, acp.PromptRequest{SessionId: s.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("x")}})
		Expect(err).To(HaveOccurred())
	})
})
