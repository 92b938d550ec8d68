package httpsse_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm/llmtest"
	"github.com/iac-code/iac-code/transport/httpsse"
)

// remoteReader plays the pod serving a GET for a connection of this edge:
// it takes events when told they are ready, as transport/cluster does over
// remote.
type remoteReader struct {
	e      *httpsse.Edge
	conn   string
	handle uint64
	ready  chan struct{}
}

func attachRemote(e *env, conn string, last *uint64) *remoteReader {
	r := &remoteReader{e: e.edge, conn: conn, ready: make(chan struct{}, 1)}
	h, reject, _, rep := e.edge.AttachRemote(conn, "", "", last, func() {
		select {
		case r.ready <- struct{}{}:
		default:
		}
	})
	ExpectWithOffset(1, rep.Status).To(Equal(http.StatusOK), rep.Error)
	ExpectWithOffset(1, reject).To(BeNil())
	r.handle = h
	return r
}

// takeUntil takes events until one answers id; it returns them all.
func (r *remoteReader) takeUntil(id float64) []httpsse.Event {
	return r.take(func(m map[string]any) bool { return m["method"] == nil && m["id"] == id })
}

// takeNewSession takes events until session/new id is answered and its
// session's available_commands_update, which follows the answer, is in.
func (r *remoteReader) takeNewSession(id float64) []httpsse.Event {
	sid := ""
	return r.take(func(m map[string]any) bool {
		if res, ok := m["result"].(map[string]any); ok && m["id"] == id {
			sid, _ = res["sessionId"].(string)
		}
		p, _ := m["params"].(map[string]any)
		u, _ := p["update"].(map[string]any)
		return sid != "" && p["sessionId"] == sid && u["sessionUpdate"] == "available_commands_update"
	})
}

// take takes events until done holds for one; it returns them all.
func (r *remoteReader) take(done func(map[string]any) bool) []httpsse.Event {
	var out []httpsse.Event
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-r.ready:
		case <-deadline:
			Fail("no answer in time")
		}
		batch, _, end := r.e.Take(r.conn, r.handle, nil)
		out = append(out, batch...)
		for _, ev := range batch {
			var m map[string]any
			Expect(json.Unmarshal(ev.Data, &m)).To(Succeed())
			if done(m) {
				return out
			}
		}
		Expect(end).To(BeFalse())
	}
}

var _ = Describe("serving another pod's stream (Owner)", func() {
	It("hands the events over in id order, replays after a Last-Event-ID, and detaches", func() {
		e := startEnv(httpsse.Config{})
		conn := e.initialize()
		r := attachRemote(e, conn, nil)
		e.send(conn, rpc(2, "session/new", map[string]any{"cwd": e.cwd}))
		// Each session's available_commands_update follows its answer: taken
		// too, so the replay below has nothing the batches lack.
		first := r.takeNewSession(2)
		e.send(conn, rpc(3, "session/new", map[string]any{"cwd": e.cwd}))
		second := r.takeNewSession(3)
		all := append(first, second...)
		for i, ev := range all {
			Expect(ev.ID).To(Equal(uint64(i + 1)))
		}
		Expect(e.edge.RemoteStreams()).To(Equal(1))

		By("a reconnect elsewhere with Last-Event-ID replaces the stream and replays what followed it")
		last := first[len(first)-1].ID
		r2 := attachRemote(e, conn, &last)
		batch, _, end := e.edge.Take(conn, r.handle, nil)
		Expect(batch).To(BeEmpty())
		Expect(end).To(BeTrue(), "the replaced stream ends")
		<-r2.ready
		batch, _, _ = e.edge.Take(conn, r2.handle, nil)
		Expect(batch).To(Equal(second))
		e.edge.Detach(conn, r.handle)
		e.edge.Detach(conn, r2.handle)
		Expect(e.edge.RemoteStreams()).To(Equal(0))

		By("a POST served for another pod is delivered as a local one")
		Expect(e.edge.ServePost(conn, "", "", "", []byte(`{"jsonrpc":"2.0","id":4,"method":"session/list","params":{}}`)).Status).
			To(Equal(http.StatusAccepted))
		Expect(e.edge.ServePost("nope", "", "", "", []byte(`{"jsonrpc":"2.0","id":4,"method":"session/list","params":{}}`)).Error).
			To(ContainSubstring("Connection not found"))
		Expect(e.edge.ServeDelete(conn, "").Status).To(Equal(http.StatusOK))
		Expect(e.post(rpc(5, "session/list", map[string]any{}), "Acp-Connection-Id", conn).status).To(Equal(http.StatusBadRequest))
	})

	It("closes the connection when the other pod does not take its events, as for a local reader", func() {
		e := startEnv(httpsse.Config{ReplayBuffer: 50})
		// A delay per chunk: deltas that arrive together go out joined.
		e.fake.Script(llmtest.Reply{Text: strings.Repeat("y ", 200), Delay: time.Millisecond})
		conn := e.initialize()
		r := attachRemote(e, conn, nil)
		e.send(conn, rpc(2, "session/new", map[string]any{"cwd": e.cwd}))
		var sid string
		for _, ev := range r.takeUntil(2) {
			var m map[string]any
			Expect(json.Unmarshal(ev.Data, &m)).To(Succeed())
			if res, ok := m["result"].(map[string]any); ok {
				sid, _ = res["sessionId"].(string)
			}
		}
		Expect(sid).NotTo(BeEmpty())
		e.prompt(conn, 3, sid, "go") // and the reader stops taking
		Eventually(e.metrics, 5*time.Second).Should(
			ContainSubstring(`iaccode_http_connections_closed_total{reason="overflow"} 1`))
		_, final, end := e.edge.Take(conn, r.handle, nil)
		Expect(end).To(BeTrue())
		Expect(string(final)).To(ContainSubstring(`"reason":"buffer_overflow"`))
	})
})
