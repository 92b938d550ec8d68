package httpsse

import (
	"bufio"
	"bytes"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/iac-code/iac-code/actors"
)

// recordingConn is a net.Conn that records every Write call.
type recordingConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (c *recordingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, bytes.Clone(b))
	return len(b), nil
}

// testPump is a pump over a recordingConn whose take hands out the given
// batches in turn, the last one with end set.
func testPump(batches ...[]event) (*pump, *recordingConn) {
	nc := &recordingConn{}
	e := &Edge{cfg: Config{}.withDefaults(), met: &metrics{}}
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	n := 0
	p := &pump{e: e, nc: nc, wake: wake, done: make(chan struct{}),
		take: func(dst []event) handout {
			b := append(dst[:0], batches[n]...)
			n++
			if n < len(batches) {
				wake <- struct{}{}
				return handout{batch: b}
			}
			return handout{batch: b, final: []byte("event: error\ndata: {}\n\n"), end: true}
		},
		detach: func() {}}
	return p, nc
}

func TestStreamWritesTheHeadAndAllReadyEventsInOneWrite(t *testing.T) {
	p, nc := testPump([]event{{id: 1, data: []byte(`{"a":1}`)}, {id: 2, data: []byte(`{"a":2}`)}, {id: 3, data: []byte(`{"a":3}`)}})
	p.run([]byte("HTTP/1.1 200 OK\r\n\r\n"))
	if len(nc.writes) != 1 {
		t.Fatalf("%d writes, want 1: %q", len(nc.writes), nc.writes)
	}
	want := "HTTP/1.1 200 OK\r\n\r\n" +
		"event: message\ndata: {\"a\":1}\nid: 1" + retryTail +
		"event: message\ndata: {\"a\":2}\nid: 2" + retryTail +
		"event: message\ndata: {\"a\":3}\nid: 3" + retryTail +
		"event: error\ndata: {}\n\n"
	if got := string(nc.writes[0]); got != want {
		t.Fatalf("wrote\n%q\nwant\n%q", got, want)
	}
	if got := p.e.met.sent(); got != 3 {
		t.Fatalf("events sent %d, want 3", got)
	}
}

func TestStreamWritesEachBatchOnceAndSplitsALongReplay(t *testing.T) {
	big := []byte(`"` + strings.Repeat("x", 20<<10) + `"`)
	var replay []event
	for i := range 8 { // 160 KiB: more than flushAt
		replay = append(replay, event{id: uint64(i + 1), data: big})
	}
	p, nc := testPump(replay, []event{{id: 9, data: []byte(`{}`)}})
	p.run(nil)
	var all []byte
	for i, w := range nc.writes {
		if len(w) > flushAt+len(big)+100 {
			t.Fatalf("write %d has %d bytes, over flushAt and one event", i, len(w))
		}
		all = append(all, w...)
	}
	if len(nc.writes) < 3 || len(nc.writes) > 5 {
		t.Fatalf("%d writes for a 160 KiB replay and one event", len(nc.writes))
	}
	if got := bytes.Count(all, []byte("event: message\n")); got != 9 {
		t.Fatalf("%d events written, want 9", got)
	}
	if !bytes.HasSuffix(all, []byte("event: message\ndata: {}\nid: 9"+retryTail+"event: error\ndata: {}\n\n")) {
		t.Fatalf("the last write is not the live event and the final one: %q", nc.writes[len(nc.writes)-1])
	}
}

func TestStreamProbesThePeerOnlyAfterAQuietSpell(t *testing.T) {
	ev := func(id uint64) []event { return []event{{id: id, data: []byte(`{}`)}} }
	p, nc := testPump(ev(1), ev(2), ev(3), ev(4))
	probes := 0
	p.probe = func(net.Conn) bool { probes++; return true }
	p.run(nil)
	if len(nc.writes) != 4 {
		t.Fatalf("%d writes for 4 batches", len(nc.writes))
	}
	if probes != 1 {
		t.Fatalf("%d probes for 4 batches in a row, want 1 (before the first)", probes)
	}
}

func TestStreamHandsNothingToAPeerThatLeft(t *testing.T) {
	p, nc := testPump([]event{{id: 1, data: []byte(`{}`)}})
	taken := false
	take := p.take
	p.take = func(dst []event) handout { taken = true; return take(dst) }
	p.probe = func(net.Conn) bool { return false }
	p.run([]byte("HTTP/1.1 200 OK\r\n\r\n"))
	if taken || len(nc.writes) != 0 {
		t.Fatalf("took events (%v) or wrote %q to a peer that left", taken, nc.writes)
	}
}

// directEnv is a connection of a bare edge whose stream is attached to a
// real loopback socket and written by its writer.
func directEnv(t *testing.T) (*conn, *stream, *bufio.Reader) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	e := &Edge{cfg: Config{}.withDefaults(), met: &metrics{}}
	c := &conn{e: e, main: &slot{}}
	st, _, _, err := c.attach("", nil, server)
	if err != nil {
		t.Fatal(err)
	}
	e.streams.Add(1)
	finished := make(chan struct{})
	go func() { defer close(finished); st.run([]byte("HTTP/1.1 200 OK\r\n\r\n")) }()
	t.Cleanup(func() {
		c.mu.Lock()
		st.end(nil, false)
		c.mu.Unlock()
		<-finished
		server.Close()
	})
	return c, st, bufio.NewReader(client)
}

// readIDs reads n events and fails unless their ids are from, from+1, ...
func readIDs(t *testing.T, br *bufio.Reader, from, n int) {
	t.Helper()
	want := from
	for want < from+n {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after id %d: %v", want-1, err)
		}
		if id, ok := strings.CutPrefix(line, "id: "); ok {
			if got, _ := strconv.Atoi(strings.TrimSpace(id)); got != want {
				t.Fatalf("event id %d, want %d", got, want)
			}
			want++
		}
	}
}

// waitIdle has the writer write the head and event 1, and waits until it
// is parked.
func waitIdle(t *testing.T, c *conn, st *stream, br *bufio.Reader) {
	c.Send(actors.Frame{Data: []byte(`{"n":1}`)})
	readIDs(t, br, 1, 1)
	for {
		c.mu.Lock()
		idle := st.live && !st.busy
		c.mu.Unlock()
		if idle {
			return
		}
		runtime.Gosched()
	}
}

func TestSendWritesASingleEventItselfWhenTheWriterIsIdle(t *testing.T) {
	c, st, br := directEnv(t)
	waitIdle(t, c, st, br)
	c.mu.Lock()
	before := st.directs
	c.mu.Unlock()
	c.Send(actors.Frame{Data: []byte(`{"n":2}`)})
	c.mu.Lock()
	after, written := st.directs, st.sl.written
	c.mu.Unlock()
	if after != before+1 || written != 2 {
		t.Fatalf("%d direct writes for one Send to an idle stream (written: %d), want 1", after-before, written)
	}
	readIDs(t, br, 2, 1)
}

func TestDirectAndWriterWritesKeepTheOrderExactlyOnce(t *testing.T) {
	// 16 MiB of events, more than the sockets hold while the client does
	// not read: direct writes find the socket full and hand over to the
	// writer.
	const n = 4000
	c, st, br := directEnv(t)
	waitIdle(t, c, st, br)
	data := []byte(`"` + strings.Repeat("d", 4<<10) + `"`)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range n {
			c.Send(actors.Frame{Data: data})
			if i%64 == 0 {
				runtime.Gosched()
			}
		}
	}()
	readIDs(t, br, 2, 100)
	<-sent // Send never blocks: the sockets fill while the client waits
	readIDs(t, br, 102, n-100)
	c.mu.Lock()
	directs, partials := st.directs, st.partials
	c.mu.Unlock()
	t.Logf("%d direct writes, %d of them partial", directs, partials)
	if directs == 0 || partials == 0 {
		t.Fatal("want direct writes, some the socket did not take whole")
	}
}

func TestEndingAStreamWakesItsWriter(t *testing.T) {
	// A writer that found a direct write under way sleeps until woken; the
	// end of the stream must wake it, or it would see the end only at the
	// next keep-alive, after endGrace closed the socket under it.
	c := &conn{e: &Edge{cfg: Config{}.withDefaults(), met: &metrics{}}, main: &slot{}}
	st := newStream(c, c.main, nil)
	c.mu.Lock()
	st.end(nil, true)
	c.mu.Unlock()
	select {
	case <-st.wakeCh:
	default:
		t.Fatal("end did not wake the writer")
	}
}

func TestTheRestOfAPartialDirectWriteGoesFirst(t *testing.T) {
	c := &conn{e: &Edge{cfg: Config{}.withDefaults(), met: &metrics{}}, main: &slot{}}
	st := newStream(c, c.main, nil)
	c.main.stream = st
	st.rest = []byte("tail of an event\n\n")
	if c.claim(st) {
		t.Fatal("a keep-alive may not go out before the rest of an event")
	}
	c.mu.Lock()
	st.end([]byte("event: error\n\n"), false)
	c.mu.Unlock()
	h := c.take(st, nil)
	if string(h.prefix) != "tail of an event\n\n" || string(h.final) != "event: error\n\n" || !h.end {
		t.Fatalf("handout %+v: want the rest, then the final event", h)
	}
}

// TestAppendData: one data line per line of the payload, whatever ends its
// lines (\n, \r\n, a lone \r), as the SSE specification reads them.
func TestAppendData(t *testing.T) {
	for in, want := range map[string]string{
		"":                              "data: \n",
		`{"a":1}`:                       "data: {\"a\":1}\n",
		"a\nb":                          "data: a\ndata: b\n",
		"a\r\nb":                        "data: a\ndata: b\n",
		"a\rb":                          "data: a\ndata: b\n",
		"a\rb\nc":                       "data: a\ndata: b\ndata: c\n",
		"a\nb\rc":                       "data: a\ndata: b\ndata: c\n",
		"a\r":                           "data: a\ndata: \n",
		"\r\n\r\n":                      "data: \ndata: \ndata: \n",
		"x\n\ny":                        "data: x\ndata: \ndata: y\n",
		strings.Repeat("z", 100) + "\r": "data: " + strings.Repeat("z", 100) + "\ndata: \n",
	} {
		if got := string(appendData(nil, []byte(in))); got != want {
			t.Errorf("appendData(%q) = %q, want %q", in, got, want)
		}
	}
}

// A connection moved off a draining pod carries its outbox with the count
// of events written as the export saw it; that pod's writer may write a
// few more before the stream ends. The client's Last-Event-ID says what it
// has: the new pod writes from after it, never those again.
func TestLastEventIDDecidesWhatIsWrittenAgain(t *testing.T) {
	for _, tc := range []struct {
		name          string
		written, last uint64
		want          []uint64
	}{
		{"the client has more than the moved outbox counts", 3, 5, []uint64{6, 7}},
		{"the client missed written events (a dropped stream)", 5, 2, []uint64{3, 4, 5, 6, 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &conn{main: &slot{}, state: stateOpen}
			out := &movedOutbox{LastID: 7, Slots: []movedSlot{{Written: tc.written}}}
			for id := uint64(1); id <= 7; id++ {
				out.Slots[0].Events = append(out.Slots[0].Events, movedEvent{ID: id, Data: []byte(`{}`)})
			}
			c.importLocked(out)
			last := tc.last
			if _, reject, _, err := c.attachStream("", &last, nil, nil); err != nil || reject != nil {
				t.Fatalf("attach: %v %s", err, reject)
			}
			var got []uint64
			for _, ev := range c.main.after(c.main.written) {
				got = append(got, ev.id)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("events to write after Last-Event-ID %d: %v, want %v", tc.last, got, tc.want)
			}
		})
	}
}
