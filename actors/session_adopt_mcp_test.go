package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/tools"
	"github.com/iac-code/iac-code/tools/mcp/mcptest"
)

// An adopted turn keeps its client's MCP servers (durable turns, issue 29):
// handed over with a drain, or, without them (the holder died), brought by
// a client that rejoins within the follow timeout. The MCP server is the
// real test server over stdio, slow to start (-delay), so that a resumed
// turn that did not wait for it would ask the model without its tools.

var _ = describeAdoptedMCP("FileStore", durableFileStores)

var _ = describeAdoptedMCP("PGStore", durablePGStores)

func describeAdoptedMCP(name string, fresh func() sharedStores) bool {
	return Describe(name+": an adopted turn's MCP servers", Ordered, func() {
		const (
			secret  = "s3cret-token-value"
			mcpTool = "mcp__srv__echo_env"
		)
		var (
			stores sharedStores
			model  *llmtest.Server
			logs   *gbytes.Buffer
			a      *Server
			h      *harness
			cwd    string
			server map[string]any
			bin    string
		)
		BeforeAll(func() {
			var err error
			bin, err = mcptest.Build(GinkgoT().TempDir())
			Expect(err).NotTo(HaveOccurred())
		})
		newServer := func(follow time.Duration) *Server {
			p, err := llm.New(llm.Config{BaseURL: model.URL(), APIKey: "k", Model: "m", Retry: llm.RetryPolicy{Attempts: 1}})
			Expect(err).NotTo(HaveOccurred())
			srv := NewServer(Deps{
				Store:    stores.open(),
				Config:   Config{Version: "test", LLM: llm.Config{APIKey: "k", Model: "m"}, FollowTimeout: follow},
				Provider: p,
				Tools:    tools.NewRegistry(tools.Bash{}),
				Log:      zerolog.New(logs).Level(zerolog.DebugLevel),
			})
			DeferCleanup(srv.Shutdown)
			return srv
		}
		BeforeEach(func() {
			stores = fresh()
			model = llmtest.NewServer()
			DeferCleanup(model.Close)
			logs = gbytes.NewBuffer()
			server = map[string]any{"name": "srv", "command": bin, "args": []any{"-delay", "400ms"},
				"env": []any{map[string]any{"name": "SRV_TOKEN", "value": secret}}}
			a = newServer(0)
			h = connectTo(a)
			cwd = GinkgoT().TempDir()
		})

		toolNames := func(r llmtest.RecordedRequest) []string {
			var names []string
			for _, t := range r.Chat.Tools {
				names = append(names, t.Function.Name)
			}
			return names
		}
		requests := func() int { return len(model.Requests()) }
		// startTurn runs a prompt on a, with the MCP server, until its
		// first step's bash call runs (its model request listed the MCP tool).
		startTurn := func() string {
			GinkgoHelper()
			sid := h.result(h.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{server}}))["sessionId"].(string)
			h.result(h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "bypass"}))
			args, _ := json.Marshal(map[string]string{"command": "sleep 0.3"})
			model.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "bash", Arguments: string(args)}}},
				llmtest.Reply{Text: "done"})
			h.call("session/prompt", textPrompt(sid, "run it"))
			Eventually(func() bool {
				for _, u := range h.out.allUpdates() {
					if u["toolCallId"] == "c1" && u["status"] == "in_progress" {
						return true
					}
				}
				return false
			}, 5*time.Second, 5*time.Millisecond).Should(BeTrue())
			Expect(toolNames(model.Requests()[0])).To(ContainElement(mcpTool))
			return sid
		}
		// over waits until the adopter let go of the session, its turn
		// ended (nothing writes to the store after the spec).
		over := func(sid string) {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				o, _, err := stores.open().Open(sid)
				g.Expect(err).NotTo(HaveOccurred())
				prior := o.(store.TurnKeeper).PriorTurn()
				g.Expect(o.Close()).To(Succeed())
				g.Expect(prior).To(BeNil(), "the turn's end cleared its mark")
			}, 15*time.Second, 50*time.Millisecond).Should(Succeed())
		}
		drain := func(handed func(id string, servers []byte)) []string {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return a.PauseTurns(ctx, handed)
		}
		// secretsKept fails when the MCP server's env value reached the
		// logs or a file of the store.
		secretsKept := func() {
			GinkgoHelper()
			Expect(string(logs.Contents())).NotTo(ContainSubstring(secret), "no log line has the server's env")
			if stores.dir == "" {
				return
			}
			Expect(filepath.WalkDir(stores.dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				data, err := os.ReadFile(path)
				if err == nil && bytes.Contains(data, []byte(secret)) {
					return fmt.Errorf("%s holds the server's env", path)
				}
				return err
			})).To(Succeed())
		}

		It("starts the servers handed over with a drain before the resumed turn's next model request", func() {
			sid := startTurn()
			b := newServer(0)
			adopted := make(chan error, 1)
			var parcel []byte
			Expect(drain(func(id string, servers []byte) {
				parcel = servers
				go func() { adopted <- b.AdoptHanded(id, servers) }()
			})).To(Equal([]string{sid}))
			Expect(parcel).To(ContainSubstring(secret), "the hand-over carries the configuration whole, env included")
			Expect(<-adopted).To(Succeed())
			Eventually(requests, 10*time.Second, 10*time.Millisecond).Should(Equal(2))
			Expect(toolNames(model.Requests()[1])).To(ContainElement(mcpTool), "the tools did not vanish mid-turn")
			Expect(b.Metrics().TurnsResumed.Load()).To(Equal(int64(1)))
			over(sid)
			secretsKept()
		})

		It("without them (its holder died), holds the resumed turn until a client rejoins with its servers", func() {
			sid := startTurn()
			Expect(drain(nil)).To(Equal([]string{sid}), "paused, then not handed over: as after kill -9")
			secretsKept()

			b := newServer(5 * time.Second)
			Expect(b.Adopt(sid)).To(Succeed())
			Consistently(requests, 600*time.Millisecond, 20*time.Millisecond).Should(Equal(1), "the turn waits for its servers")
			g := connectTo(b)
			g.result(g.call("session/resume", map[string]any{"sessionId": sid, "cwd": cwd, "mcpServers": []any{server}}))
			Eventually(requests, 10*time.Second, 10*time.Millisecond).Should(Equal(2))
			Expect(toolNames(model.Requests()[1])).To(ContainElement(mcpTool), "the rejoining client's servers serve the resumed turn")
			g.conn.Close(2 * time.Second)
			over(sid)
			secretsKept()
		})

		It("without them, goes on without the servers once the follow timeout passed, and records their names only", func() {
			sid := startTurn()
			Expect(drain(nil)).To(Equal([]string{sid}))
			o, _, err := stores.open().Open(sid)
			Expect(err).NotTo(HaveOccurred())
			Expect(o.(store.TurnKeeper).PriorTurn().MCPServers).To(Equal([]string{"srv"}), "the turn record names the servers")
			Expect(o.(store.TurnKeeper).Pause()).To(Succeed())
			Expect(o.Close()).To(Succeed())

			b := newServer(800 * time.Millisecond)
			start := time.Now()
			Expect(b.Adopt(sid)).To(Succeed())
			Eventually(requests, 10*time.Second, 10*time.Millisecond).Should(Equal(2))
			Expect(time.Since(start)).To(BeNumerically(">=", 800*time.Millisecond), "it waited for a client")
			Expect(toolNames(model.Requests()[1])).NotTo(ContainElement(mcpTool))
			Expect(toolNames(model.Requests()[1])).To(ContainElement("bash"))
			over(sid)
		})
	})
}
