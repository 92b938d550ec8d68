package store_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/llm"
	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/store/pgtest"
)

// pgSchema is one fresh schema of the package's server: its URL, and SQL
// against it as the superuser.
type pgSchema struct {
	srv  *pgtest.Server
	name string
	url  string
}

func newPGSchema() pgSchema {
	srv := requirePG()
	name, u, err := srv.NewSchema()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(srv.DropSchema, name) // registered first: runs after the stores closed
	return pgSchema{srv: srv, name: name, url: u}
}

// via is the schema's URL through another host:port (a pgtest.Proxy).
func (p pgSchema) via(hostport string) string {
	return p.srv.URLAt(hostport, "postgres") + "&search_path=" + p.name
}

func (p pgSchema) conn() *pgx.Conn {
	c, err := pgx.Connect(context.Background(), p.url)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func (p pgSchema) exec(sql string, args ...any) {
	_, err := p.conn().Exec(context.Background(), sql, args...)
	Expect(err).NotTo(HaveOccurred())
}

// openPG opens a PGStore closed after the spec. Contract specs never
// renew: their leases last an hour unless a spec expires them.
func openPG(u string, opts ...store.Option) *store.PGStore {
	st, err := store.NewPostgres(u, opts...)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(st.Close)
	return st
}

func pgBackend() backend {
	db := newPGSchema()
	return backend{
		open: func(opts ...store.Option) store.Store {
			return openPG(db.url, append([]store.Option{store.WithLeaseTTL(time.Hour), store.WithLeaseRenew(30 * time.Minute)}, opts...)...)
		},
		holder: func(st store.Store) store.InUseError {
			return store.InUseError{Owner: st.(*store.PGStore).Incarnation()}
		},
		expire: func(id string) {
			db.exec("UPDATE iac_sessions SET lease_expires = now() - interval '1 second' WHERE id = $1", id)
		},
		crash: func(holder store.Store, _ store.Session) {
			Expect(holder.(*store.PGStore).MarkDead(context.Background(), holder.(*store.PGStore).Incarnation())).To(Succeed())
		},
	}
}

var _ = Describe("PGStore", func() {
	var db pgSchema

	BeforeEach(func() { db = newPGSchema() })

	fast := []store.Option{store.WithLeaseTTL(time.Second), store.WithLeaseRenew(200 * time.Millisecond)}

	It("renews a lease past its TTL; after a partition takes the holder away, another process takes over and the old holder's late write is refused", func() {
		proxy, err := pgtest.NewProxy(fmt.Sprintf("127.0.0.1:%d", db.srv.Port()))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(proxy.Close)
		// A renewal may stall 1.35 s (a loaded CI machine) before the lease lapses.
		lease := []store.Option{store.WithLeaseTTL(1500 * time.Millisecond), store.WithLeaseRenew(150 * time.Millisecond)}
		logsA := &logBuf{}
		a := openPG(db.via(proxy.Addr()), append(lease, store.WithLogger(zerolog.New(logsA)))...)
		b := openPG(db.url, lease...)

		s, err := a.Create(store.Meta{ID: "s1", Cwd: "/p"})
		Expect(err).NotTo(HaveOccurred())
		Expect(s.Append(store.MessageEntry(userMsg("one")))).To(Succeed())
		// Alive and renewing: the lease outlives its TTL.
		Consistently(func() error { _, _, err := b.Open("s1"); return err }, 2*time.Second, 100*time.Millisecond).
			Should(MatchError(store.ErrInUse))
		var inUse *store.InUseError
		_, _, err = b.Open("s1")
		Expect(errors.As(err, &inUse)).To(BeTrue())
		Expect(inUse.Owner).To(Equal(a.Incarnation()))

		proxy.Cut() // a can no longer reach the database: it stops renewing
		cut := time.Now()
		var left time.Duration
		Expect(db.conn().QueryRow(context.Background(), "SELECT lease_expires - now() FROM iac_sessions WHERE id = 's1'").Scan(&left)).To(Succeed())
		Expect(left).To(BeNumerically(">", 0))
		Expect(left).To(BeNumerically("<=", 1500*time.Millisecond))
		var (
			s2 store.Session
			es []store.Entry
		)
		Eventually(func() error {
			s2, es, err = b.Open("s1")
			return err
		}, 5*time.Second, 10*time.Millisecond).Should(Succeed())
		took := time.Since(cut)
		GinkgoWriter.Printf("expired-lease takeover %v after the partition, the lease had %v left (TTL 1.5 s, renewal every 150 ms)\n", took, left)
		Expect(took).To(BeNumerically(">=", left-50*time.Millisecond), "not before the lease expired")
		Expect(took).To(BeNumerically("<", left+time.Second), "soon after it expired")
		Expect(messages(es)).To(Equal([]llm.Message{userMsg("one")}))
		Expect(b.Takeovers()).To(BeEquivalentTo(1))

		proxy.Heal()
		// The old holder's write never lands: until its connections come
		// back it fails for want of a database, then as fenced.
		for i := 0; ; i++ {
			err := s.Append(store.MessageEntry(assistantText("late")))
			Expect(err).To(HaveOccurred(), "a write after the takeover")
			if errors.Is(err, store.ErrFenced) {
				Expect(err.Error()).To(ContainSubstring(b.Incarnation()))
				break
			}
			Expect(i).To(BeNumerically("<", 100), "not fenced: %v", err)
			time.Sleep(20 * time.Millisecond)
		}
		Eventually(logsA.warnings, 3*time.Second, 50*time.Millisecond).
			Should(ContainElement("session lease lost to another owner; its writes are refused"))
		Expect(logsA.warnings()).To(ContainElement("lease renewal failed"))

		Expect(s2.Append(store.MessageEntry(assistantText("two")))).To(Succeed())
		Expect(s2.Close()).To(Succeed())
		Expect(s.Close()).To(Succeed())
		_, es, err = b.Open("s1")
		Expect(err).NotTo(HaveOccurred())
		Expect(messages(es)).To(Equal([]llm.Message{userMsg("one"), assistantText("two")}))
	})

	It("never lets two holders win a race for one lease (500 races of 5 processes)", func() {
		const races, holders, perRound = 500, 5, 10
		stores := make([]*store.PGStore, holders)
		for i := range stores {
			// Leases that cannot expire during the test: every race is
			// between live holders.
			stores[i] = openPG(db.url, store.WithLeaseTTL(time.Hour), store.WithLeaseRenew(30*time.Minute))
		}
		for r := range races {
			s, err := stores[0].Create(store.Meta{ID: fmt.Sprintf("r%03d", r), Cwd: "/p"})
			Expect(err).NotTo(HaveOccurred())
			Expect(s.Close()).To(Succeed())
		}
		type result struct {
			holder int
			sess   store.Session
			err    error
		}
		results := make([][]result, races)
		for round := 0; round < races; round += perRound {
			var wg sync.WaitGroup
			start := make(chan struct{})
			for r := round; r < round+perRound; r++ {
				results[r] = make([]result, holders)
				for h := range holders {
					wg.Add(1)
					go func() {
						defer GinkgoRecover()
						defer wg.Done()
						<-start
						sess, _, err := stores[h].Open(fmt.Sprintf("r%03d", r))
						results[r][h] = result{holder: h, sess: sess, err: err}
					}()
				}
			}
			close(start)
			wg.Wait()
		}
		for r, rs := range results {
			winner := -1
			for _, res := range rs {
				if res.err == nil {
					Expect(winner).To(Equal(-1), "race %d: holders %d and %d both won", r, winner, res.holder)
					winner = res.holder
				}
			}
			Expect(winner).NotTo(Equal(-1), "race %d: nobody won", r)
			for _, res := range rs {
				if res.err != nil {
					var inUse *store.InUseError
					Expect(errors.As(res.err, &inUse)).To(BeTrue(), "race %d: %v", r, res.err)
					Expect(inUse.Owner).To(Equal(stores[winner].Incarnation()))
				}
			}
			Expect(rs[winner].sess.Append(store.MessageEntry(userMsg("won")))).To(Succeed())
		}
		// One acquisition per race after the creation: no lease was ever
		// granted twice.
		var epochs, n int64
		Expect(db.conn().QueryRow(context.Background(), "SELECT sum(lease_epoch), count(*) FROM iac_sessions").Scan(&epochs, &n)).To(Succeed())
		Expect(n).To(BeEquivalentTo(races))
		Expect(epochs).To(BeEquivalentTo(2 * races))
	})

	It("orders every write racing a takeover: it lands before it, seen by the new holder, or is refused (100 races)", func() {
		long := []store.Option{store.WithLeaseTTL(time.Hour), store.WithLeaseRenew(30 * time.Minute)}
		a := openPG(db.url, long...)
		b := openPG(db.url, long...)
		for r := range 100 {
			id := fmt.Sprintf("w%03d", r)
			s, err := a.Create(store.Meta{ID: id, Cwd: "/p"})
			Expect(err).NotTo(HaveOccurred())
			db.exec("UPDATE iac_sessions SET lease_expires = now() - interval '1 second' WHERE id = $1", id)
			var (
				wg sync.WaitGroup
				es []store.Entry
				s2 store.Session
			)
			written := []int64{}
			wg.Add(2)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for {
					err := s.Append(store.MessageEntry(userMsg("a")))
					if err != nil {
						Expect(err).To(MatchError(store.ErrFenced))
						return
					}
					written = append(written, s.LastSeq())
				}
			}()
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				s2, es, err = b.Open(id)
				Expect(err).NotTo(HaveOccurred())
			}()
			wg.Wait()
			Expect(len(es)).To(Equal(len(written)), "race %d: the new holder sees exactly the writes that succeeded", r)
			Expect(seqs(es)).To(Equal(written))
			Expect(s2.Append(store.MessageEntry(userMsg("b")))).To(Succeed())
			Expect(s2.Close()).To(Succeed())
			Expect(s.Close()).To(Succeed())
		}
	})

	It("migrates once under concurrent starts; a restart applies nothing", func() {
		const starts = 8
		logs := make([]*logBuf, starts)
		var wg sync.WaitGroup
		for i := range starts {
			logs[i] = &logBuf{}
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				st, err := store.NewPostgres(db.url, store.WithLogger(zerolog.New(logs[i])))
				Expect(err).NotTo(HaveOccurred())
				Expect(st.Close()).To(Succeed())
			}()
		}
		wg.Wait()
		applied := 0
		for _, l := range logs {
			applied += strings.Count(l.text(), "applied schema migration")
		}
		Expect(applied).To(Equal(store.SchemaVersion()), "each migration applied by exactly one start")
		var versions, latest int
		Expect(db.conn().QueryRow(context.Background(), "SELECT count(*), max(version) FROM iac_schema_migrations").
			Scan(&versions, &latest)).To(Succeed())
		Expect(versions).To(Equal(store.SchemaVersion()))
		Expect(latest).To(Equal(store.SchemaVersion()))

		again := &logBuf{}
		openPG(db.url, store.WithLogger(zerolog.New(again)))
		Expect(again.text()).NotTo(ContainSubstring("applied schema migration"))
		Expect(again.text()).To(ContainSubstring(fmt.Sprintf(`"schema_version":%d`, store.SchemaVersion())))
	})

	It("gives the sessions stored before owners to default, in place, when it migrates", func() {
		st := openPG(db.url)
		Expect(st.Close()).To(Succeed())
		// The schema of version 1 with a session of that time.
		ctx := context.Background()
		_, err := db.conn().Exec(ctx, `DELETE FROM iac_schema_migrations WHERE version = 2;
			ALTER TABLE iac_sessions DROP COLUMN owner;
			INSERT INTO iac_sessions (id, cwd, updated_at, meta) VALUES ('old', '/p', now(),
				'{"version":1,"id":"old","cwd":"/p","createdAt":"2025-01-01T00:00:00Z","updatedAt":"2025-01-01T00:00:00Z","usage":{}}')`)
		Expect(err).NotTo(HaveOccurred())
		st = openPG(db.url)
		defer st.Close()
		def, _, err := st.ListOwned(store.DefaultOwner, "", "", 10)
		Expect(err).NotTo(HaveOccurred())
		Expect(def).To(HaveLen(1))
		Expect(def[0].ID).To(Equal("old"))
		Expect(def[0].Owner).To(Equal(store.DefaultOwner), "meta migrated in place")
		other, _, err := st.ListOwned("alice", "", "", 10)
		Expect(err).NotTo(HaveOccurred())
		Expect(other).To(BeEmpty())
	})

	It("stores every entry and the meta as the exact bytes it encoded", func() {
		st := openPG(db.url)
		s, err := st.Create(store.Meta{ID: "s1", Cwd: "/p", Title: "t"})
		Expect(err).NotTo(HaveOccurred())
		in := protocol.RawMessage(`{"z":1,"a":{"y":2.50},"k":"dup","k":"\u00e9"}`)
		es := []store.Entry{store.MessageEntry(llm.Message{Role: llm.RoleAssistant,
			Content: []llm.Block{{Type: llm.BlockToolUse, ToolCallID: "c", Name: "bash", Input: in}}})}
		Expect(s.Append(es...)).To(Succeed())
		want, err := protocol.Marshal(&es[0])
		Expect(err).NotTo(HaveOccurred())
		var row, meta string
		Expect(db.conn().QueryRow(context.Background(), "SELECT entry::text FROM iac_history WHERE session_id = 's1'").Scan(&row)).To(Succeed())
		Expect(row).To(Equal(string(want)))
		Expect(db.conn().QueryRow(context.Background(), "SELECT meta::text FROM iac_sessions WHERE id = 's1'").Scan(&meta)).To(Succeed())
		Expect(meta).To(Equal(string(protocol.MustMarshal(s.Meta()))))
		Expect(s.Close()).To(Succeed())
	})

	It("skips history rows that do not decode, with a warning", func() {
		logs := &logBuf{}
		st := openPG(db.url, store.WithLogger(zerolog.New(logs)))
		s, err := st.Create(store.Meta{ID: "s1", Cwd: "/p"})
		Expect(err).NotTo(HaveOccurred())
		Expect(s.Append(store.MessageEntry(userMsg("one")))).To(Succeed())
		Expect(s.Close()).To(Succeed())
		db.exec(`INSERT INTO iac_history (session_id, seq, entry) VALUES ('s1', 2, '{"seq":2,"kind":"message"}'), ('s1', 3, '{"seq":9}')`)
		s, es, err := st.Open("s1")
		Expect(err).NotTo(HaveOccurred())
		Expect(messages(es)).To(Equal([]llm.Message{userMsg("one")}))
		Expect(logs.warnings()).To(Equal([]string{"skipping corrupt history row", "skipping corrupt history row"}))
		Expect(s.LastSeq()).To(BeEquivalentTo(3), "appends go after every row, decodable or not")
		Expect(s.Append(store.MessageEntry(userMsg("four")))).To(Succeed())
		Expect(s.Close()).To(Succeed())
	})

	Describe("incarnations", func() {
		It("registers, heartbeats, looks up and lists incarnations", func() {
			a := openPG(db.url, store.WithIncarnation("pod-a"))
			Expect(a.Incarnation()).To(Equal("pod-a"))
			Expect(a.Heartbeat(context.Background())).To(MatchError(store.ErrUnknownIncarnation))
			Expect(a.Register(context.Background(), "10.0.0.1:7000")).To(Succeed())
			inc, err := a.LookupIncarnation(context.Background(), "pod-a")
			Expect(err).NotTo(HaveOccurred())
			Expect(inc.Addr).To(Equal("10.0.0.1:7000"))
			Expect(inc.Dead.IsZero()).To(BeTrue())
			Expect(a.Heartbeat(context.Background())).To(Succeed())
			later, err := a.LookupIncarnation(context.Background(), "pod-a")
			Expect(err).NotTo(HaveOccurred())
			Expect(later.Heartbeat).To(BeTemporally(">", inc.Heartbeat))
			Expect(later.Started).To(Equal(inc.Started))

			_, err = a.LookupIncarnation(context.Background(), "pod-x")
			Expect(err).To(MatchError(store.ErrUnknownIncarnation))
			b := openPG(db.url, append(fast, store.WithIncarnation("pod-b"))...)
			Expect(b.Register(context.Background(), "10.0.0.2:7000")).To(Succeed())
			all, err := b.Incarnations(context.Background())
			Expect(err).NotTo(HaveOccurred())
			Expect(all).To(HaveLen(2))
			Expect(all[0].ID).To(Equal("pod-a"))
			// b's renewal loop heartbeats it.
			first := all[1].Heartbeat
			Eventually(func() time.Time {
				inc, err := b.LookupIncarnation(context.Background(), "pod-b")
				Expect(err).NotTo(HaveOccurred())
				return inc.Heartbeat
			}, 2*time.Second, 50*time.Millisecond).Should(BeTemporally(">", first))
		})

		It("takes over at once the sessions of an incarnation declared dead", func() {
			a := openPG(db.url)
			b := openPG(db.url)
			s, err := a.Create(store.Meta{ID: "s1", Cwd: "/p"})
			Expect(err).NotTo(HaveOccurred())
			_, _, err = b.Open("s1")
			Expect(err).To(MatchError(store.ErrInUse))
			Expect(b.MarkDead(context.Background(), a.Incarnation())).To(Succeed())
			s2, _, err := b.Open("s1")
			Expect(err).NotTo(HaveOccurred())
			Expect(b.Takeovers()).To(BeEquivalentTo(1))
			Expect(s.Append(store.MessageEntry(userMsg("late")))).To(MatchError(store.ErrFenced))
			Expect(s2.Append(store.MessageEntry(userMsg("mine")))).To(Succeed())
			inc, err := b.LookupIncarnation(context.Background(), a.Incarnation())
			Expect(err).NotTo(HaveOccurred())
			Expect(inc.Dead.IsZero()).To(BeFalse())
		})

		It("releases every lease of an incarnation at once, and Close releases its own (SIGTERM)", func() {
			a := openPG(db.url)
			b := openPG(db.url)
			c, err := store.NewPostgres(db.url)
			Expect(err).NotTo(HaveOccurred())
			Expect(c.Register(context.Background(), "10.0.0.3:7000")).To(Succeed())
			var held []store.Session
			for _, id := range []string{"a1", "a2"} {
				s, err := a.Create(store.Meta{ID: id, Cwd: "/p"})
				Expect(err).NotTo(HaveOccurred())
				held = append(held, s)
			}
			cs, err := c.Create(store.Meta{ID: "c1", Cwd: "/p"})
			Expect(err).NotTo(HaveOccurred())

			n, err := b.ReleaseLeases(context.Background(), a.Incarnation())
			Expect(err).NotTo(HaveOccurred())
			Expect(n).To(BeEquivalentTo(2))
			for _, id := range []string{"a1", "a2"} {
				s, _, err := b.Open(id)
				Expect(err).NotTo(HaveOccurred())
				Expect(s.Close()).To(Succeed())
			}
			Expect(b.Takeovers()).To(BeZero(), "released, not taken over")
			Expect(held[0].Append(store.MessageEntry(userMsg("late")))).To(MatchError(store.ErrFenced))

			Expect(c.Close()).To(Succeed()) // still holding c1 open
			s, _, err := b.Open("c1")
			Expect(err).NotTo(HaveOccurred())
			Expect(s.Close()).To(Succeed())
			inc, err := b.LookupIncarnation(context.Background(), c.Incarnation())
			Expect(err).NotTo(HaveOccurred())
			Expect(inc.Dead.IsZero()).To(BeFalse(), "a closed store's incarnation is dead")
			Expect(cs.Append(store.MessageEntry(userMsg("after close")))).To(HaveOccurred())
		})

		It("records where a connection moved, moves it again, forgets it, and drops the rows of dead pods", func() {
			a := openPG(db.url, store.WithIncarnation("pod-a"))
			Expect(a.Register(context.Background(), "10.0.0.1:7000")).To(Succeed())
			b := openPG(db.url, store.WithIncarnation("pod-b"))
			Expect(b.Register(context.Background(), "10.0.0.2:7000")).To(Succeed())
			ctx := context.Background()
			to, err := b.MovedConnection(ctx, "pod-x.1")
			Expect(err).NotTo(HaveOccurred())
			Expect(to).To(BeEmpty(), "never moved")
			Expect(a.MoveConnection(ctx, "pod-x.1", "pod-a")).To(Succeed())
			Expect(b.MoveConnection(ctx, "pod-x.2", "pod-a")).To(Succeed())
			Expect(b.MoveConnection(ctx, "pod-x.1", "pod-b")).To(Succeed())
			Expect(b.MovedConnection(ctx, "pod-x.1")).To(Equal("pod-b"), "moved twice: the last pod")
			Expect(b.MovedConnection(ctx, "pod-x.2")).To(Equal("pod-a"))
			Expect(b.ForgetConnection(ctx, "pod-x.1")).To(Succeed())
			Expect(b.MovedConnection(ctx, "pod-x.1")).To(BeEmpty())
			Expect(b.MarkDead(ctx, "pod-a")).To(Succeed())
			Expect(b.MoveConnection(ctx, "pod-x.3", "pod-b")).To(Succeed())
			Expect(b.MovedConnection(ctx, "pod-x.2")).To(BeEmpty(), "its pod is dead: the connection is gone")
			Expect(b.MovedConnection(ctx, "pod-x.3")).To(Equal("pod-b"))
		})
	})

	It("never shows the database password in errors or logs", func() {
		pw := db.srv.Password()
		logs := &logBuf{}
		log := store.WithLogger(zerolog.New(logs))
		var errs []error
		wrong := db.srv.URLAt(fmt.Sprintf("127.0.0.1:%d", db.srv.Port()), "postgres")
		wrong = strings.Replace(wrong, pw, pw+"-wrong", 1)
		_, err := store.NewPostgres(wrong, log)
		errs = append(errs, err)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		closed := l.Addr().String()
		Expect(l.Close()).To(Succeed())
		_, err = store.NewPostgres(db.srv.URLAt(closed, "postgres")+"&connect_timeout=2", log)
		errs = append(errs, err)
		// An unescaped '@' in a password: pgx's own message would show its tail.
		_, err = store.NewPostgres("postgres://postgres:"+pw+"@"+pw+"@127.0.0.1:99999/db", log)
		errs = append(errs, err)
		Expect(err).To(MatchError(ContainSubstring("invalid PostgreSQL URL postgres://postgres@127.0.0.1:99999/db: invalid port")))
		_, err = store.Open("mysql://root:"+pw+"@db/x", "", log)
		errs = append(errs, err)
		_, err = store.Open("root:"+pw+"@db", "", log)
		errs = append(errs, err)
		_, err = store.Open("password=hunter2", "", log) // a key/value DSN is not a URL
		Expect(err).To(MatchError(ContainSubstring(`unsupported store URL scheme "?"`)))
		Expect(err.Error()).NotTo(ContainSubstring("hunter2"))
		_, err = store.Open("host=db password="+pw, "", log)
		errs = append(errs, err)

		// At run time: the database goes away under an open store.
		proxy, err := pgtest.NewProxy(fmt.Sprintf("127.0.0.1:%d", db.srv.Port()))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(proxy.Close)
		st := openPG(db.via(proxy.Addr()), append(fast, log)...)
		s, err := st.Create(store.Meta{ID: "s1", Cwd: "/p"})
		Expect(err).NotTo(HaveOccurred())
		proxy.Cut()
		DeferCleanup(proxy.Heal) // before the store's Close
		errs = append(errs, s.Append(store.MessageEntry(userMsg("x"))))
		_, _, err = st.List("", "", 10)
		errs = append(errs, err)
		_, _, err = st.Open("s2")
		errs = append(errs, err)
		Eventually(logs.warnings, 2*time.Second, 50*time.Millisecond).Should(ContainElement("lease renewal failed"))

		for i, err := range errs {
			Expect(err).To(HaveOccurred(), "case %d", i)
			Expect(err.Error()).NotTo(ContainSubstring(pw), "case %d", i)
			GinkgoWriter.Println(err)
		}
		Expect(logs.text()).NotTo(BeEmpty())
		Expect(logs.text()).NotTo(ContainSubstring(pw))
		Expect(logs.text()).To(ContainSubstring(`"db":"postgres://postgres@127.0.0.1:`))
	})

	It("is what Open and OpenFromEnv pick for a postgres:// URL, with the lease settings of the environment", func() {
		env := map[string]string{store.EnvStoreURL: db.url, store.EnvLeaseTTL: "7s", store.EnvLeaseRenew: "1s"}
		b, err := store.OpenFromEnv(GinkgoT().TempDir(), func(k string) string { return env[k] })
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(b.Close)
		Expect(b).To(BeAssignableToTypeOf(&store.PGStore{}))
		s, err := b.Create(store.Meta{ID: "s1", Cwd: "/p"})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(s.Close)
		var left time.Duration
		Expect(db.conn().QueryRow(context.Background(), "SELECT lease_expires - now() FROM iac_sessions WHERE id = 's1'").Scan(&left)).To(Succeed())
		Expect(left).To(BeNumerically("~", 7*time.Second, 500*time.Millisecond))

		env[store.EnvLeaseRenew] = "7s"
		_, err = store.OpenFromEnv("", func(k string) string { return env[k] })
		Expect(err).To(MatchError(ContainSubstring("must be positive and shorter than the lease TTL")))
		env[store.EnvLeaseTTL] = "soon"
		_, err = store.OpenFromEnv("", func(k string) string { return env[k] })
		Expect(err).To(MatchError(ContainSubstring(`IAC_CODE_LEASE_TTL: want a positive duration such as 10s, got "soon"`)))
	})
})
