package actors

import (
	"errors"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
)

// gatedStore is a real file store whose Open and handles' Acquire, once
// close is called, wait until open is: a slow lock wait or takeover (or,
// for Open, a Share by another pod), on cue.
type gatedStore struct {
	store.Store
	mu      sync.Mutex
	gate    chan struct{} // nil: Acquire does not wait
	entered chan struct{} // one value per Acquire that waits
	// returned gets what each Acquire that waited returned.
	returned chan error
	// slowRelease: each Release sleeps this long before letting go (a
	// slow disk, a busy machine).
	slowRelease time.Duration
}

func (g *gatedStore) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = make(chan struct{})
}

func (g *gatedStore) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.gate)
	g.gate = nil
}

func (g *gatedStore) Create(meta store.Meta) (store.Session, error) {
	s, err := g.Store.Create(meta)
	if err != nil {
		return nil, err
	}
	return &gatedSession{Session: s, g: g}, nil
}

func (g *gatedStore) Open(id string) (store.Session, []store.Entry, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		g.entered <- struct{}{}
		<-gate
	}
	s, es, err := g.Store.Open(id)
	if gate != nil {
		g.returned <- err
	}
	if err != nil {
		return nil, nil, err
	}
	return &gatedSession{Session: s, g: g}, es, nil
}

type gatedSession struct {
	store.Session
	g *gatedStore
}

func (s *gatedSession) Acquire() ([]store.Entry, bool, error) {
	s.g.mu.Lock()
	gate := s.g.gate
	s.g.mu.Unlock()
	if gate == nil {
		return s.Session.Acquire()
	}
	s.g.entered <- struct{}{}
	<-gate
	es, changed, err := s.Session.Acquire()
	s.g.returned <- err
	return es, changed, err
}

func (s *gatedSession) Release() error {
	s.g.mu.Lock()
	d := s.g.slowRelease
	s.g.mu.Unlock()
	time.Sleep(d)
	return s.Session.Release()
}

// MarkTurn and RecordTurn keep the file store's TurnMarker and
// TurnRecorder: the session lets go of its lock between turns, so that
// every request after a turn acquires, and marks its turns in the lock.
func (s *gatedSession) MarkTurn(running bool) error {
	return s.Session.(store.TurnMarker).MarkTurn(running)
}

func (s *gatedSession) RecordTurn(t *store.RunningTurn) error {
	return s.Session.(store.TurnRecorder).RecordTurn(t)
}

var _ = Describe("a session taking its store handle back", func() {
	var (
		p    *scriptedProvider
		s    *sessionHarness
		g    *gatedStore
		root string
		cwd  string
	)
	BeforeEach(func() {
		root, cwd = GinkgoT().TempDir(), GinkgoT().TempDir()
		st, err := store.New(root, store.WithLockWait(time.Second))
		Expect(err).NotTo(HaveOccurred())
		g = &gatedStore{Store: st, entered: make(chan struct{}, 4), returned: make(chan error, 4)}
		p = &scriptedProvider{}
		s = newSessionHarnessOn(p, g, nil)
	})
	AfterEach(func() {
		g.mu.Lock()
		if g.gate != nil {
			close(g.gate)
			g.gate = nil
		}
		g.mu.Unlock()
		s.close()
	})

	// started opens a session on h and ends one turn in it, after which it
	// has let go of its handle (file store, between turns).
	started := func(h *harness) string {
		GinkgoHelper()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "one")))["stopReason"]).To(Equal("end_turn"))
		return sid
	}
	// waiting closes the gate, sends a prompt and returns its id once its
	// Acquire waits at the gate.
	waiting := func(h *harness, sid, text string) float64 {
		GinkgoHelper()
		g.close()
		id := h.call("session/prompt", textPrompt(sid, text))
		Eventually(g.entered, 5*time.Second).Should(Receive(), "the prompt's Acquire waits")
		return id
	}
	unanswered := func(h *harness, id float64) {
		GinkgoHelper()
		Consistently(func() map[string]any { return h.out.response(id) }, 200*time.Millisecond, 10*time.Millisecond).Should(BeNil())
	}
	// otherOpens: another handle on the store can open sid (the session's
	// hold was let go of, by the goroutine that took it back late maybe).
	otherOpens := func(sid string) {
		GinkgoHelper()
		other, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error {
			o, _, err := other.Open(sid)
			if err == nil {
				err = o.Close()
			}
			return err
		}, 5*time.Second, 20*time.Millisecond).Should(Succeed(), "the session's hold is let go of")
	}
	// stopSession stops the actor of session sid (a crash, the server's
	// shutdown).
	stopSession := func(sid string) {
		s.srv.sys.Root.Stop(actor.NewPID(s.srv.sys.Address(), sessionActorName(sid)))
	}
	// texts are the texts of the messages of the model's call-th request.
	texts := func(call int) []string {
		var out []string
		for _, m := range p.requests()[call].Messages {
			out = append(out, m.TextOf())
		}
		return out
	}

	It("answers another client's $/cancel_request meanwhile, then runs the waiting prompt", func() {
		h := s.connect()
		sid := started(h)
		h2 := s.connect()
		h2.result(h2.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))

		first := waiting(h, sid, "two")
		second := h2.call("session/prompt", textPrompt(sid, "from h2"))
		unanswered(h2, second)
		h2.notify("$/cancel_request", map[string]any{"requestId": second})
		// answered while the first prompt still waits for the handle
		Expect(h2.result(second)["stopReason"]).To(Equal("cancelled"))
		unanswered(h, first)
		Expect(p.requests()).To(HaveLen(1))

		g.open()
		Expect(h.result(first)["stopReason"]).To(Equal("end_turn"))
		Expect(p.requests()).To(HaveLen(2))
		Expect(texts(1)).To(Equal([]string{"one", "ok", "two"}))
	})

	It("answers a waiting prompt cancelled at session/cancel, and serves the requests after it in order", func() {
		h := s.connect()
		sid := started(h)

		prompt := waiting(h, sid, "never")
		setMode := h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"})
		h.notify("session/cancel", map[string]any{"sessionId": sid})
		Expect(h.result(prompt)["stopReason"]).To(Equal("cancelled"))
		three := h.call("session/prompt", textPrompt(sid, "three"))
		unanswered(h, setMode)
		unanswered(h, three)

		g.open()
		h.result(setMode)
		Expect(h.result(three)["stopReason"]).To(Equal("end_turn"))
		Expect(indexOfResponse(h.out.all(), setMode)).To(BeNumerically("<", indexOfResponse(h.out.all(), three)))
		Expect(p.requests()).To(HaveLen(2), "the cancelled prompt never reached the model")
		Expect(texts(1)).To(Equal([]string{"one", "ok", "three"}))
	})

	It("answers a waiting prompt cancelled at session/close, and closes the handle before answering the close", func() {
		h := s.connect()
		sid := started(h)

		prompt := waiting(h, sid, "never")
		closeID := h.call("session/close", map[string]any{"sessionId": sid})
		Expect(h.result(prompt)["stopReason"]).To(Equal("cancelled"))
		unanswered(h, closeID)

		g.open()
		h.result(closeID)
		otherOpens(sid)
		Expect(p.requests()).To(HaveLen(1))
	})

	It("answers a leaving connection's waiting requests before it goes, its waiting prompt cancelled", func() {
		h := s.connect()
		sid := started(h)

		prompt := waiting(h, sid, "never")
		setMode := h.call("session/set_mode", map[string]any{"sessionId": sid, "modeId": "plan"})
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			h.conn.Close(5 * time.Second)
		}()
		Consistently(closed, 100*time.Millisecond).ShouldNot(BeClosed(), "the close waits for the handle")
		Expect(h.out.response(prompt)).To(HaveKeyWithValue("result", HaveKeyWithValue("stopReason", "cancelled")))

		g.open()
		Eventually(closed, 5*time.Second).Should(BeClosed())
		Expect(h.out.response(setMode)).To(HaveKey("result"), "set_mode is answered before the connection goes")
		Expect(p.requests()).To(HaveLen(1))
	})

	It("answers the error of the store to the request that waited for it", func() {
		h := s.connect()
		sid := started(h)
		other, err := store.New(root)
		Expect(err).NotTo(HaveOccurred())
		o, _, err := other.Open(sid)
		Expect(err).NotTo(HaveOccurred())

		prompt := waiting(h, sid, "held elsewhere")
		g.open()
		Expect(h.errorOf(prompt)["code"]).To(Equal(float64(protocol.CodeSessionInUse)))
		Expect(o.Close()).To(Succeed())
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "now")))["stopReason"]).To(Equal("end_turn"))
	})

	It("lets go of a file store's lock before it answers the turn: another process opens the session at once", func() {
		g.mu.Lock()
		g.slowRelease = 100 * time.Millisecond
		g.mu.Unlock()
		h := s.connect()
		sid := started(h)
		other, err := store.New(root) // no lock wait
		Expect(err).NotTo(HaveOccurred())
		o, _, err := other.Open(sid)
		Expect(err).NotTo(HaveOccurred(), "the lock is free once the answer is here")
		Expect(o.Close()).To(Succeed())
	})

	// closedOnDisk opens a session on h, ends a turn in it and closes it:
	// the next load opens it from the store.
	closedOnDisk := func(h *harness) string {
		GinkgoHelper()
		sid := started(h)
		h.result(h.call("session/close", map[string]any{"sessionId": sid}))
		return sid
	}
	// loading closes the gate, sends a load and returns its id once its
	// Open waits at the gate.
	loading := func(h *harness, sid string) float64 {
		GinkgoHelper()
		g.close()
		id := h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd})
		Eventually(g.entered, 5*time.Second).Should(Receive(), "the load's Open waits")
		return id
	}

	It("opens a session off its goroutine: a prompt cancelled meanwhile is answered, the one before it runs after the load", func() {
		h := s.connect()
		sid := closedOnDisk(h)

		load := loading(h, sid)
		first := h.call("session/prompt", textPrompt(sid, "two"))
		second := h.call("session/prompt", textPrompt(sid, "cancelled"))
		h.notify("$/cancel_request", map[string]any{"requestId": second})
		Expect(h.result(second)["stopReason"]).To(Equal("cancelled"))
		unanswered(h, load)
		unanswered(h, first)

		g.open()
		h.result(load)
		Expect(h.result(first)["stopReason"]).To(Equal("end_turn"))
		Expect(indexOfResponse(h.out.all(), load)).To(BeNumerically("<", indexOfResponse(h.out.all(), first)))
		Expect(p.requests()).To(HaveLen(2))
		Expect(texts(1)).To(Equal([]string{"one", "ok", "two"}))
	})

	It("lets go of a handle opened after the session stopped", func() {
		h := s.connect()
		sid := closedOnDisk(h)

		loading(h, sid)
		stopSession(sid)
		Eventually(s.srv.Metrics().Sessions.Load, 5*time.Second, 10*time.Millisecond).Should(BeZero(), "the session stopped")

		g.open()
		var err error
		Eventually(g.returned, 5*time.Second).Should(Receive(&err))
		Expect(err).NotTo(HaveOccurred(), "the store opened the session after it stopped")
		otherOpens(sid)
	})

	It("lets go of a handle taken back after the session stopped", func() {
		h := s.connect()
		sid := started(h)

		prompt := waiting(h, sid, "never")
		stopSession(sid)
		Expect(h.result(prompt)["stopReason"]).To(Equal("cancelled"))
		Eventually(s.srv.Metrics().Sessions.Load, 5*time.Second, 10*time.Millisecond).Should(BeZero(), "the session stopped")

		g.open()
		var err error
		Eventually(g.returned, 5*time.Second).Should(Receive(&err))
		Expect(err).NotTo(HaveOccurred(), "the hold came back after the session stopped")
		otherOpens(sid)
	})
})

// indexOfResponse is the position of the answer to id among frames (-1:
// none).
func indexOfResponse(frames []map[string]any, id float64) int {
	for i, f := range frames {
		if f["id"] == id && f["method"] == nil {
			return i
		}
	}
	return -1
}

// twoPods are two stores on one fresh PostgreSQL schema: this pod's and
// another's (leases outlive the spec).
func twoPods() (mine, theirs *store.PGStore) {
	GinkgoHelper()
	srv := requirePG()
	schema, dbURL, err := srv.NewSchema()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(srv.DropSchema, schema)
	open := func() *store.PGStore {
		st, err := store.NewPostgres(dbURL, store.WithLeaseTTL(time.Hour), store.WithLeaseRenew(30*time.Minute))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(st.Close)
		return st
	}
	return open(), open()
}

// slowHandover is the pod holding a session, slow to answer: Share waits at
// gate, then refuses; TakeOver lets go of that pod's handle, as a pod
// handing the session over does.
type slowHandover struct {
	gate    chan struct{}
	entered chan string
	holder  store.Session
}

func (h *slowHandover) Share(string, string, string, string, *actor.PID, []byte, []byte) (*actor.PID, error) {
	h.entered <- "share"
	<-h.gate
	return nil, errors.New("not shared")
}

func (h *slowHandover) TakeOver(string, string) error {
	h.entered <- "takeover"
	return h.holder.Close()
}

var _ = Describe("a session opening one another pod holds (PostgreSQL)", func() {
	It("serves a $/cancel_request while the holder is slow to share it, then takes it over and runs the prompt sent after the load", func() {
		mine, theirs := twoPods()
		p := &scriptedProvider{}
		s := newSessionHarnessOn(p, mine, nil)
		defer s.close()
		handover := &slowHandover{gate: make(chan struct{}), entered: make(chan string, 4)}
		s.srv.SetHandover(handover)

		cwd := GinkgoT().TempDir()
		h := s.connect()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		Expect(h.result(h.call("session/prompt", textPrompt(sid, "one")))["stopReason"]).To(Equal("end_turn"))
		h.result(h.call("session/close", map[string]any{"sessionId": sid}))
		var err error
		handover.holder, _, err = theirs.Open(sid)
		Expect(err).NotTo(HaveOccurred())

		load := h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd})
		Eventually(handover.entered, 5*time.Second).Should(Receive(Equal("share")))
		first := h.call("session/prompt", textPrompt(sid, "two"))
		second := h.call("session/prompt", textPrompt(sid, "cancelled"))
		h.notify("$/cancel_request", map[string]any{"requestId": second})
		Expect(h.result(second)["stopReason"]).To(Equal("cancelled"))
		Expect(h.out.response(load)).To(BeNil())
		Expect(h.out.response(first)).To(BeNil())

		close(handover.gate)
		Eventually(handover.entered, 5*time.Second).Should(Receive(Equal("takeover")))
		h.result(load)
		Expect(h.result(first)["stopReason"]).To(Equal("end_turn"))
		Expect(p.requests()).To(HaveLen(2))
	})
})

// sharingHandover is a pod holding a session that shares it: its proxy
// answers the load (a frame to the stub) before Share returns, as a proxy
// on another pod may.
type sharingHandover struct {
	root  *actor.RootContext
	proxy *actor.PID
}

func (h *sharingHandover) Share(_, _, _, _ string, stub *actor.PID, _, open []byte) (*actor.PID, error) {
	load, e := protocol.Decode(open)
	if e != nil {
		return nil, errors.New(e.Message)
	}
	h.root.Send(stub, &clusterpb.Relay{Body: protocol.EncodeResult(load.ID, map[string]any{"fromProxy": true})})
	time.Sleep(50 * time.Millisecond) // the frame is in before the pid is back
	return h.proxy, nil
}

func (h *sharingHandover) TakeOver(string, string) error { return errors.New("not handed over") }

var _ = Describe("a session shared by the pod that holds it (PostgreSQL)", func() {
	It("passes on the proxy's frames that came while Share was under way", func() {
		mine, theirs := twoPods()
		s := newSessionHarnessOn(&scriptedProvider{}, mine, nil)
		defer s.close()
		proxy := s.srv.sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
		s.srv.SetHandover(&sharingHandover{root: s.srv.sys.Root, proxy: proxy})

		cwd := GinkgoT().TempDir()
		h := s.connect()
		sid := h.result(h.call("session/new", map[string]any{"cwd": cwd}))["sessionId"].(string)
		h.result(h.call("session/close", map[string]any{"sessionId": sid}))
		holder, _, err := theirs.Open(sid)
		Expect(err).NotTo(HaveOccurred())
		defer holder.Close()

		Expect(h.result(h.call("session/load", map[string]any{"sessionId": sid, "cwd": cwd}))).To(HaveKeyWithValue("fromProxy", true))
	})
})
