package store_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/iac-code/iac-code/protocol"
	"github.com/iac-code/iac-code/store"
	"github.com/iac-code/iac-code/store/pgtest"
)

// The PostgreSQL benchmarks run against their own server with PostgreSQL's
// default durability (fsync, synchronous commit): the figures are what a
// real deployment pays on this disk, not the test server's fsync=off.
//
//	go test ./store -run '^$' -bench PG -benchtime 2000x
var benchServer struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

func benchPG(b *testing.B) string {
	b.Helper()
	benchServer.once.Do(func() {
		benchServer.srv, benchServer.err = pgtest.Start(pgtest.Options{Durable: true})
	})
	if benchServer.err == pgtest.ErrUnavailable {
		b.Skip(pgtest.SkipMessage)
	}
	if benchServer.err != nil {
		b.Fatal(benchServer.err)
	}
	name, u, err := benchServer.srv.NewSchema()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = benchServer.srv.DropSchema(name) })
	return u
}

func stopBenchPG() {
	if benchServer.srv != nil {
		_ = benchServer.srv.Stop()
	}
}

func benchPGStore(b *testing.B) *store.PGStore {
	st, err := store.NewPostgres(benchPG(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

// reportPercentiles adds p50 and p99 of the timed operations, in µs.
func reportPercentiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// One message per Append, each its own transaction: the latency a turn
// pays per completed message.
func BenchmarkPGAppend(b *testing.B) {
	st := benchPGStore(b)
	s, err := st.Create(store.Meta{ID: "s", Cwd: "/p"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	msgs := benchMessages(3)
	ds := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		t := time.Now()
		if err := s.Append(store.MessageEntry(msgs[i%3])); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t))
		i++
	}
	reportPercentiles(b, ds)
}

// Open of a session with 5,000 messages: lease, meta and history in one
// round trip, then decoding.
func BenchmarkPGOpen5000(b *testing.B) {
	st := benchPGStore(b)
	createBig(b, st)
	ds := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	for b.Loop() {
		t := time.Now()
		s, es, err := st.Open("big")
		if err != nil || len(es) != 5000 {
			b.Fatal(err, len(es))
		}
		ds = append(ds, time.Since(t))
		_ = s.Close()
	}
	reportPercentiles(b, ds)
}

// Lease acquisition (Open of an empty session) and release (Close); the
// percentiles are of the acquisition alone.
func BenchmarkPGLeaseAcquire(b *testing.B) {
	st := benchPGStore(b)
	s, err := st.Create(store.Meta{ID: "s", Cwd: "/p"})
	if err != nil {
		b.Fatal(err)
	}
	_ = s.Close()
	ds := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	for b.Loop() {
		t := time.Now()
		s, _, err := st.Open("s")
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t))
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	reportPercentiles(b, ds)
}

// Acquire of a released 5,000-message session nobody else took meanwhile
// (what an idle session's next request pays): the epoch shows it unchanged,
// so no history is read; the percentiles are of Acquire alone, Release
// follows each.
func BenchmarkPGAcquire5000(b *testing.B) {
	st := benchPGStore(b)
	createBig(b, st)
	s, _, err := st.Open("big")
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ds := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Release(); err != nil {
			b.Fatal(err)
		}
		t := time.Now()
		es, changed, err := s.Acquire()
		if err != nil || changed || es != nil {
			b.Fatal(err, changed, len(es))
		}
		ds = append(ds, time.Since(t))
	}
	reportPercentiles(b, ds)
}

func BenchmarkPGList1000(b *testing.B) { benchList1000(b, benchPGStore(b)) }

// The column type of history rows: json keeps the bytes as written, jsonb
// parses them into its binary form on insert and prints them back on read
// (sorted keys, one of each duplicate, normalised numbers). Insert of one
// entry, and read of 5,000 as text.
func BenchmarkPGColumnType(b *testing.B) {
	u := benchPG(b)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	msgs := benchMessages(5000)
	rows := make([][]byte, len(msgs))
	for i, m := range msgs {
		e := store.MessageEntry(m)
		e.Seq = int64(i + 1)
		rows[i] = protocol.MustMarshal(&e)
	}
	for _, typ := range []string{"json", "jsonb"} {
		table := "bench_" + typ
		if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (seq bigint PRIMARY KEY, entry %s NOT NULL)", table, typ)); err != nil {
			b.Fatal(err)
		}
		b.Run(typ+"/insert", func(b *testing.B) {
			seq := int64(0)
			for b.Loop() {
				seq++
				if _, err := conn.Exec(ctx, "INSERT INTO "+table+" (seq, entry) VALUES ($1, $2)", seq, rows[seq%int64(len(rows))]); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := conn.Exec(ctx, "TRUNCATE "+table); err != nil {
				b.Fatal(err)
			}
		})
		if _, err := conn.CopyFrom(ctx, pgx.Identifier{table}, []string{"seq", "entry"}, pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
			return []any{int64(i + 1), rows[i]}, nil
		})); err != nil {
			b.Fatal(err)
		}
		b.Run(typ+"/read5000", func(b *testing.B) {
			for b.Loop() {
				rs, err := conn.Query(ctx, "SELECT entry::text FROM "+table+" ORDER BY seq")
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for rs.Next() {
					n++
				}
				if rs.Err() != nil || n != len(rows) {
					b.Fatal(rs.Err(), n)
				}
			}
		})
	}
}
