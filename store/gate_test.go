package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/store"
)

// gateBackend makes gates on one fresh set of data: every call stands for
// another process (pod) sharing the limit.
type gateBackend func(limit int) llm.Gate

func localGates() gateBackend {
	var once sync.Once
	var g *llm.LocalGate
	return func(limit int) llm.Gate {
		once.Do(func() { g = llm.NewLocalGate(limit) })
		return g // one process: one gate
	}
}

func pgGates() gateBackend {
	db := newPGSchema()
	st := openPG(db.url)
	return func(limit int) llm.Gate {
		g := st.ModelGate(limit)
		DeferCleanup(g.Close)
		return g
	}
}

// The one contract of llm.Gate, against both gates.
var _ = describeGateContract("LocalGate", localGates)
var _ = describeGateContract("ModelGate (PostgreSQL)", pgGates)

func describeGateContract(name string, fresh func() gateBackend) bool {
	return Describe(name+" contract", func() {
		var gates gateBackend
		BeforeEach(func() { gates = fresh() })
		ctx := context.Background()

		// enter starts a request of person that holds its slot until
		// hold closes; it returns once the request runs or waits.
		type request struct {
			person  string
			running chan struct{}
			hold    chan struct{}
			done    chan error
		}
		enter := func(g llm.Gate, c context.Context, key, person string, started *[]string, mu *sync.Mutex) *request {
			r := &request{person: person, running: make(chan struct{}), hold: make(chan struct{}), done: make(chan error, 1)}
			queued := make(chan struct{})
			var once sync.Once
			queue := func() { once.Do(func() { close(queued) }) }
			go func() {
				defer GinkgoRecover()
				release, err := g.Enter(c, key, person, func(llm.Wait) { queue() })
				if err != nil {
					r.done <- err
					queue()
					return
				}
				if started != nil {
					mu.Lock()
					*started = append(*started, person)
					mu.Unlock()
				}
				close(r.running)
				queue()
				<-r.hold
				release()
				r.done <- nil
			}()
			Eventually(queued, 5*time.Second).Should(BeClosed())
			return r
		}

		It("lets at most the limit run at once, over every process, and every request through", func() {
			a, b := gates(2), gates(2)
			var running, peak atomic.Int32
			var wg sync.WaitGroup
			for i := range 24 {
				wg.Add(1)
				go func() {
					defer GinkgoRecover()
					defer wg.Done()
					g := []llm.Gate{a, b}[i%2]
					release, err := g.Enter(ctx, "k", []string{"alice", "bob", "carol"}[i%3], nil)
					Expect(err).NotTo(HaveOccurred())
					n := running.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					time.Sleep(5 * time.Millisecond)
					running.Add(-1)
					release()
				}()
			}
			wg.Wait()
			Expect(peak.Load()).To(BeEquivalentTo(2))
			// Another key has slots of its own.
			r, err := a.Enter(ctx, "other", "alice", nil)
			Expect(err).NotTo(HaveOccurred())
			r()
		})

		It("gives the next slot to the waiting person served least recently, so nobody waits for all of another's requests", func() {
			a, b := gates(1), gates(1)
			var mu sync.Mutex
			var started []string
			first := enter(a, ctx, "k", "x", nil, &mu)
			Eventually(first.running).Should(BeClosed())
			var reqs []*request
			for i, who := range []string{"alice", "alice", "alice", "alice", "bob", "carol"} {
				reqs = append(reqs, enter([]llm.Gate{a, b}[i%2], ctx, "k", who, &started, &mu))
			}
			close(first.hold)
			released := map[*request]bool{}
			for range reqs {
				// Exactly one runs at a time: let it finish.
				var run *request
				Eventually(func() *request {
					for _, o := range reqs {
						select {
						case <-o.running:
							if !released[o] {
								return o
							}
						default:
						}
					}
					return nil
				}, 5*time.Second).ShouldNot(BeNil())
				for _, o := range reqs {
					select {
					case <-o.running:
						if !released[o] {
							Expect(run).To(BeNil(), "one at a time")
							run = o
						}
					default:
					}
				}
				released[run] = true
				close(run.hold)
				Eventually(run.done, 5*time.Second).Should(Receive(BeNil()))
			}
			mu.Lock()
			defer mu.Unlock()
			Expect(started).To(Equal([]string{"alice", "bob", "carol", "alice", "alice", "alice"}))
		})

		It("lets a waiting request be cancelled, holding nothing", func() {
			a := gates(1)
			holder := enter(a, ctx, "k", "alice", nil, nil)
			Eventually(holder.running).Should(BeClosed())
			cctx, cancel := context.WithCancel(ctx)
			waiter := enter(a, cctx, "k", "bob", nil, nil)
			cancel()
			Eventually(waiter.done, 5*time.Second).Should(Receive(MatchError(context.Canceled)))
			next := enter(a, ctx, "k", "carol", nil, nil)
			close(holder.hold)
			Eventually(next.running, 5*time.Second).Should(BeClosed())
			close(next.hold)
			Eventually(next.done, 5*time.Second).Should(Receive(BeNil()))
		})

		It("holds every process's requests of a paused key until the pause ends, saying so", func() {
			a, b := gates(2), gates(2)
			until := time.Now().Add(600 * time.Millisecond)
			Expect(a.Pause(ctx, "k", until)).To(Succeed())
			Expect(a.Pause(ctx, "k", time.Now())).To(Succeed(), "an earlier end does not shorten it")
			start := time.Now()
			var w llm.Wait
			release, err := b.Enter(ctx, "k", "alice", func(got llm.Wait) { w = got })
			Expect(err).NotTo(HaveOccurred())
			release()
			Expect(time.Since(start)).To(BeNumerically(">=", 500*time.Millisecond))
			Expect(w.PausedUntil).To(BeTemporally("~", until, 50*time.Millisecond))
			other, err := b.Enter(ctx, "other", "alice", func(llm.Wait) { Fail("another key is not paused") })
			Expect(err).NotTo(HaveOccurred())
			other()
		})
	})
}

var _ = Describe("ModelGate", func() {
	It("frees the slots of a process that stopped renewing them", func() {
		// covered by the expiry in iac_model_gate_step; the TTL is 30 s,
		// too long for a spec: the holder's rows are expired by hand.
		db := newPGSchema()
		st := openPG(db.url)
		a, b := st.ModelGate(1), st.ModelGate(1)
		DeferCleanup(a.Close)
		DeferCleanup(b.Close)
		_, err := a.Enter(context.Background(), "k", "alice", nil) // never released: its pod died
		Expect(err).NotTo(HaveOccurred())
		db.exec("UPDATE iac_model_queue SET expires = now() - interval '1 second'")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		release, err := b.Enter(ctx, "k", "bob", nil)
		Expect(err).NotTo(HaveOccurred())
		release()
	})
})

var _ store.UsageCounter = (*store.PGStore)(nil)
