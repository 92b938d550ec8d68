package e2e

import (
	"encoding/json"
	"time"

	"github.com/fasthttp/websocket"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
)

// writeRaw sends frame on p as it is (its id is not p's counter).
func (p *wsPeer) writeRaw(frame string) {
	p.check.ClientSent([]byte(frame))
	p.wmu.Lock()
	defer p.wmu.Unlock()
	ExpectWithOffset(1, p.ws.WriteMessage(websocket.TextMessage, []byte(frame))).To(Succeed())
}

// listFrame asks the pod at base for session/list on a new WebSocket and
// returns the answer's frame as the pod sent it, every frame schema-checked.
func listFrame(base string) []byte {
	GinkgoHelper()
	ws, _, err := dialWS(base, nil, nil)
	Expect(err).NotTo(HaveOccurred())
	defer ws.Close()
	check := newWireChecker(schemaV1)
	Expect(ws.SetReadDeadline(time.Now().Add(20 * time.Second))).To(Succeed())
	call := func(id int, method string, params any) []byte {
		b, err := json.Marshal(jrpc(id, method, params))
		Expect(err).NotTo(HaveOccurred())
		check.ClientSent(b)
		Expect(ws.WriteMessage(websocket.TextMessage, b)).To(Succeed())
		for {
			_, data, err := ws.ReadMessage()
			Expect(err).NotTo(HaveOccurred())
			check.ServerSent(data)
			var m struct {
				ID     json.RawMessage
				Method string
			}
			if json.Unmarshal(data, &m) == nil && m.Method == "" && string(m.ID) == itoa(id) {
				return data
			}
		}
	}
	call(1, "initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "e2e-list", "version": "1"}})
	frame := call(2, "session/list", map[string]any{})
	Expect(check.Violations()).To(BeEmpty())
	return frame
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// listedMeta is the _meta of session sid in a session/list answer frame
// (nil without one); the session must be listed.
func listedMeta(frame []byte, sid string) map[string]any {
	GinkgoHelper()
	var res struct {
		Result struct {
			Sessions []map[string]any `json:"sessions"`
		} `json:"result"`
	}
	Expect(json.Unmarshal(frame, &res)).To(Succeed())
	for _, s := range res.Result.Sessions {
		if s["sessionId"] == sid {
			meta, _ := s["_meta"].(map[string]any)
			return meta
		}
	}
	Fail("session " + sid + " not listed: " + string(frame))
	return nil
}

var _ = Describe("session/list across pods", Label("e2e", "cluster", "postgres", "remote"), func() {
	It("shows the turn running on another pod as _meta.activeTurn with its prompt's id as sent, and not once it ended", func() {
		fake := llmtest.NewServer()
		DeferCleanup(fake.Close)
		cwd := GinkgoT().TempDir()
		fake.Script(toolCallReply("w1", "write_file", map[string]any{"path": "elsewhere.txt", "content": "from pod A"}),
			llmtest.Reply{Text: "Written on pod A."})
		cl := newCluster(fake, 2)
		home, away := cl.pods[0], cl.pods[1]

		p := openWS(home.base, nil, nil)
		sid := p.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}})["sessionId"].(string)
		Expect(listedMeta(listFrame(away.base), sid)).To(BeNil(), "no turn yet")

		By("a turn on pod A waits for its permission answer")
		// A string id with an escape: the other pod must show these bytes.
		const promptID = `"turn-\u00e9 7"`
		p.writeRaw(`{"jsonrpc":"2.0","id":` + promptID + `,"method":"session/prompt","params":{"sessionId":"` + sid +
			`","prompt":[{"type":"text","text":"write it"}]}}`)
		perm := p.until("permission request", methodIs("session/request_permission"))

		By("session/list on pod B shows it")
		frame := listFrame(away.base)
		Expect(string(frame)).To(ContainSubstring(`"promptRequest":` + promptID))
		active, ok := listedMeta(frame, sid)["activeTurn"].(map[string]any)
		Expect(ok).To(BeTrue(), "activeTurn in pod B's list: %s", frame)
		Expect(active["promptRequest"]).To(Equal("turn-é 7"))
		startedAt, err := time.Parse(time.RFC3339, active["startedAt"].(string))
		Expect(err).NotTo(HaveOccurred())
		Expect(startedAt).To(BeTemporally("~", time.Now(), time.Minute))
		Expect(listedMeta(listFrame(home.base), sid)).To(HaveKeyWithValue("activeTurn", active), "both pods show the same turn")

		By("the turn ends on pod A; pod B's list no longer shows it")
		b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": perm["id"],
			"result": map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow_once"}}})
		Expect(err).NotTo(HaveOccurred())
		p.writeRaw(string(b))
		answer := p.until("the prompt's answer", func(m map[string]any) bool { return m["id"] == "turn-é 7" && m["method"] == nil })
		Expect(answer["result"]).To(HaveKeyWithValue("stopReason", "end_turn"))
		// Cleared in the store before the answer went out: no wait needed.
		Expect(listedMeta(listFrame(away.base), sid)).To(BeNil())
		Expect(p.check.Violations()).To(BeEmpty())
	})
})
