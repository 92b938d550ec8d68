package httpsse

import (
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestFreshListenerEvictsTheOldestSilent: at the cap the oldest connection
// that sent no request is closed; a served one never is; closing frees room.
func TestFreshListenerEvictsTheOldestSilent(t *testing.T) {
	const maxConns = 4 // room for 3, one spare worker
	var peers []net.Conn
	sl := &scriptedListener{}
	for range 6 {
		a, b := net.Pipe()
		sl.results = append(sl.results, a)
		peers = append(peers, b)
	}
	l := newFreshListener(sl, maxConns, zerolog.Nop())
	accept := func() *trackedConn {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c.(*trackedConn)
	}
	closed := func(i int) bool {
		_, err := peers[i].Write([]byte("x"))
		return err != nil
	}
	c0, c1, c2 := accept(), accept(), accept()
	l.served(c0) // c0 sent a request
	// fasthttp closes what the listener evicted, as its read fails.
	go func() { _, _ = c1.Read(make([]byte, 1)); _ = c1.Close() }()
	c3 := accept() // full: c1, the oldest silent one, goes
	if open, pending := counts(l); !closed(1) || open != 3 || pending != 0 {
		t.Fatalf("c1 not evicted (open %d, pending %d)", open, pending)
	}
	go func() { _, _ = c2.Read(make([]byte, 1)); _ = c2.Close() }()
	accept() // c2 goes
	if !closed(2) {
		t.Fatal("c2 not evicted")
	}
	_ = c3.Close() // room again: nothing evicted
	accept()
	if open, _ := counts(l); open != 3 || l.evicted != 2 {
		t.Fatalf("open %d evicted %d", open, l.evicted)
	}
	go func() { _, _ = peers[0].Read(make([]byte, 1)) }()
	if _, err := c0.Write([]byte("y")); err != nil {
		t.Fatal("the served connection was closed")
	}
}

func counts(l *freshListener) (open, pending int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.pending
}

// A tracked TCP connection keeps its descriptor: the stream's direct
// writes and the peer probe reach it through rawConnOf (without it they
// silently fall back, and a gone client is never noticed).
func TestTrackedConnKeepsItsDescriptor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newFreshListener(ln, 64, zerolog.Nop())
	defer l.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if rc, err := rawConnOf(nc); rc == nil || err != nil {
		t.Fatalf("rawConnOf(tracked) = %v, %v; want the socket's descriptor", rc, err)
	}
	if !peerOpen(nc) {
		t.Fatal("peerOpen: the client is connected")
	}
	client.Close()
	deadline := time.Now().Add(2 * time.Second)
	for peerOpen(nc) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if peerOpen(nc) {
		t.Fatal("peerOpen still reports a closed client as open")
	}
}
