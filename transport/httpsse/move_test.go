package httpsse_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/iac-code/iac-code/transport/httpsse"
)

// loopPods joins two edges of this process as two pods: what
// transport/cluster does over remote, by direct calls (forwarded POSTs and
// DELETEs, the steps of a move). Remote GETs are not served: a client
// reconnects to the pod the connection moved to.
type loopPods struct {
	mu    sync.Mutex
	edges map[string]*httpsse.Edge
	moved map[string]string
	// attaches counts the remote GETs asked for (Attach).
	attaches int
}

type loopPod struct {
	p    *loopPods
	self string
}

func (l *loopPod) other() (string, *httpsse.Edge) {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	for inc, e := range l.p.edges {
		if inc != l.self {
			return inc, e
		}
	}
	return "", nil
}

func (l *loopPod) edge(inc string) *httpsse.Edge {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	return l.p.edges[inc]
}

func (l *loopPod) Incarnation() string                { return l.self }
func (l *loopPod) Bind(httpsse.Owner)                 {}
func (l *loopPod) Collectors() []prometheus.Collector { return nil }
func (l *loopPod) Drain(context.Context)              {}
func (l *loopPod) Post(owner, connID, sessionID, who, traceparent string, body []byte) httpsse.Reply {
	return l.edge(owner).ServePost(connID, sessionID, who, traceparent, body)
}
func (l *loopPod) Delete(owner, connID, who string) httpsse.Reply {
	return l.edge(owner).ServeDelete(connID, who)
}
func (l *loopPod) Attach(string, string, string, string, *uint64) (httpsse.RemoteSource, httpsse.Reply, []byte, bool) {
	l.p.mu.Lock()
	l.p.attaches++
	l.p.mu.Unlock()
	return nil, httpsse.Reply{Status: http.StatusServiceUnavailable, Error: "no remote streams here"}, nil, false
}
func (l *loopPod) MovedTo(connID string) string {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	return l.p.moved[connID]
}
func (l *loopPod) PrepareMove(connID string, data []byte, _ []string) (string, []byte, error) {
	to, e := l.other()
	reply, err := e.AdoptConn(httpsse.MovePrepare, connID, data)
	return to, reply, err
}
func (l *loopPod) CommitMove(to, connID string, data []byte) error {
	if _, err := l.edge(to).AdoptConn(httpsse.MoveCommit, connID, data); err != nil {
		return err
	}
	l.p.mu.Lock()
	l.p.moved[connID] = to
	l.p.mu.Unlock()
	return nil
}
func (l *loopPod) AbortMove(to, connID string) {
	_, _ = l.edge(to).AdoptConn(httpsse.MoveAbort, connID, nil)
}
func (l *loopPod) ForgetMoved(string) {}

var _ = Describe("moving a connection to another pod (drain)", func() {
	var (
		a, b       *env
		tokA, tokB = "alice-token-0123456789", "bob-token-0123456789"
	)
	var pods *loopPods
	BeforeEach(func() {
		pods = &loopPods{edges: map[string]*httpsse.Edge{}, moved: map[string]string{}}
		chain := usersChain("alice", tokA, "bob", tokB)
		a = startEnv(httpsse.Config{Auth: chain, Cluster: &loopPod{p: pods, self: "aaaa"}})
		b = startEnv(httpsse.Config{Auth: chain, Cluster: &loopPod{p: pods, self: "bbbb"}})
		pods.edges["aaaa"], pods.edges["bbbb"] = a.edge, b.edge
	})
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	metrics := func(e *env) func() string {
		return func() string { return string(e.do(http.MethodGet, "/metrics", nil, bearer(tokA)...).body) }
	}

	It("hands over the outbox: every event once, ids kept, Last-Event-ID honoured, no initialize again", func() {
		conn := a.initialize(bearer(tokA)...)
		// Answered in order by the connection actor (session/list is
		// answered off it and may overtake).
		list := func(e *env, id int) {
			e.send(conn, rpc(id, "x/unknown", map[string]any{}), bearer(tokA)...)
		}
		s := a.stream(conn, bearer(tokA)...)
		for id := 2; id <= 6; id++ {
			list(a, id)
		}
		evs := s.until(isResponse(6))
		Expect(evs).To(HaveLen(5))
		idOf := map[float64]string{}
		for _, ev := range evs {
			idOf[ev.msg["id"].(float64)] = ev.id
		}
		s.close()
		By("events the client has not read yet, buffered on the first pod")
		list(a, 7)
		list(a, 8)
		Eventually(metrics(a)).Should(ContainSubstring("iaccode_http_buffered_events 7"))
		By("a stream open at the move ends")
		s2 := a.stream(conn, append(bearer(tokA), "Last-Event-ID", idOf[6])...)
		got := s2.until(isResponse(8))
		Expect(got).To(HaveLen(2))

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		Expect(a.edge.HandOverConnections(ctx)).To(Equal(1))
		s2.waitEOF()
		Expect(metrics(a)()).To(ContainSubstring(`iaccode_http_connections_closed_total{reason="moved"} 1`))
		Expect(metrics(b)()).To(ContainSubstring("iaccode_http_connections_moved_in_total 1"))

		By("the client resumes on the pod it moved to after the last event it kept")
		r := b.stream(conn, append(bearer(tokA), "Last-Event-ID", idOf[3])...)
		replay := r.until(isResponse(8))
		var ids []float64
		var eventIDs []string
		for _, ev := range replay {
			ids = append(ids, ev.msg["id"].(float64))
			eventIDs = append(eventIDs, ev.id)
		}
		Expect(ids).To(Equal([]float64{4, 5, 6, 7, 8}), "each event once, in order")
		Expect(eventIDs[:3]).To(Equal([]string{idOf[4], idOf[5], idOf[6]}), "event ids kept")
		Expect(eventIDs[3:]).To(Equal([]string{got[0].id, got[1].id}))

		By("requests go on without initialize, on either pod, numbered after the moved events")
		list(b, 9)
		ev := r.until(isResponse(9))
		Expect(ev).To(HaveLen(1))
		last, _ := strconv.Atoi(got[1].id)
		Expect(ev[0].id).To(Equal(strconv.Itoa(last + 1)))
		list(a, 10) // the first pod forwards to where it went
		Expect(r.until(isResponse(10))).To(HaveLen(1))
		r.quiet(200 * time.Millisecond)

		By("a stream asked of the draining pod is refused at once: it would end when the pod exits")
		attaches := func() int { pods.mu.Lock(); defer pods.mu.Unlock(); return pods.attaches }
		before := attaches()
		resp, cancelGet := a.getStream(conn, append(bearer(tokA), "Last-Event-ID", ev[0].id)...)
		Expect(resp.StatusCode).To(Equal(http.StatusServiceUnavailable))
		Expect(resp.Header.Get("Retry-After")).To(Equal("1"), "the client tries again, through the balancer")
		Expect(resp.Close).To(BeTrue(), "a pooling proxy picks another pod for the next request")
		body, _ := io.ReadAll(resp.Body)
		Expect(string(body)).To(ContainSubstring("draining"))
		cancelGet()
		Expect(attaches()).To(Equal(before), "nothing attached on the connection's pod")
		list(b, 11) // the refused GET took nothing: the stream on b still gets every event
		Expect(r.until(isResponse(11))).To(HaveLen(1))

		By("the connection stays its owner's: another credential is refused on both pods")
		for _, e := range []*env{a, b} {
			res := e.post(rpc(12, "session/list", map[string]any{}), append(bearer(tokB), "Acp-Connection-Id", conn)...)
			Expect(res.status).To(Equal(http.StatusForbidden), string(res.body))
		}
		resp, cancelGet = b.getStream(conn, bearer(tokB)...)
		defer cancelGet()
		Expect(resp.StatusCode).To(Equal(http.StatusForbidden))
		_ = resp.Body.Close()
	})

	It("keeps a connection whose move was refused (the other pod drains too)", func() {
		conn := a.initialize(bearer(tokA)...)
		b.edge.HandOverConnections(context.Background()) // b drains: it takes none
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		Expect(a.edge.HandOverConnections(ctx)).To(Equal(0))
		s := a.stream(conn, bearer(tokA)...)
		a.send(conn, rpc(2, "session/list", map[string]any{}), bearer(tokA)...)
		Expect(s.until(isResponse(2))).To(HaveLen(1))
		Expect(a.logs.String()).To(ContainSubstring("connection not handed over"))
		Expect(fmt.Sprint(b.edge.RemoteStreams())).To(Equal("0"))
	})
})
