package llm

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"
)

func TestDialAddrIsWhatTheTransportDials(t *testing.T) {
	proxy := func(u string) func(*http.Request) (*url.URL, error) {
		return func(*http.Request) (*url.URL, error) { return url.Parse(u) }
	}
	none := func(*http.Request) (*url.URL, error) { return nil, nil }
	for _, c := range []struct {
		base  string
		proxy func(*http.Request) (*url.URL, error)
		want  string
	}{
		{"https://api.openai.com/v1", nil, "api.openai.com:443"},
		{"https://api.openai.com/v1", none, "api.openai.com:443"},
		{"http://127.0.0.1:8080/v1", none, "127.0.0.1:8080"},
		{"http://[::1]/v1", nil, "[::1]:80"},
		{"https://api.anthropic.com/", proxy("http://proxy.internal:3128"), "proxy.internal:3128"},
		{"https://api.anthropic.com/", proxy("http://proxy.internal"), "proxy.internal:80"},
		{"https://api.anthropic.com/", proxy("socks5://10.0.0.1"), "10.0.0.1:1080"},
		{"not a url", nil, ""},
		{"ftp://host/", nil, ""},
	} {
		if got := dialAddr(c.base, c.proxy); got != c.want {
			t.Errorf("dialAddr(%q) = %q, want %q", c.base, got, c.want)
		}
	}
}

// listen accepts connections on loopback and hands them over.
func listen(t *testing.T) (net.Listener, chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			accepted <- c
		}
	}()
	return ln, accepted
}

func newTestWarm(ln net.Listener) *warmConns {
	var d net.Dialer
	return newWarmConns(d.DialContext, "http://"+ln.Addr().String()+"/v1", nil)
}

// A connection dialled ahead and not used within its time is closed, and
// the session it was for no longer counts: the next session opened dials.
func TestWarmConnectionExpires(t *testing.T) {
	ln, accepted := listen(t)
	w := newTestWarm(ln)
	w.ttl = 50 * time.Millisecond
	w.Warm()
	var server net.Conn
	select {
	case server = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("nothing dialled")
	}
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := server.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("the connection dialled ahead was not closed after its time: %d, %v", n, err)
	}
	w.mu.Lock()
	idle, wanted := len(w.idle), w.wanted
	w.mu.Unlock()
	if idle != 0 || wanted != 0 {
		t.Fatalf("after expiry: %d idle, %d wanted; want 0 and 0", idle, wanted)
	}
	w.Warm()
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("a session opened after the expiry dialled nothing")
	}
}

// No more than max connections wait dialled ahead, however many sessions
// open.
func TestWarmConnectionsAreBounded(t *testing.T) {
	ln, accepted := listen(t)
	w := newTestWarm(ln)
	w.max = 3
	for range 10 {
		w.Warm()
	}
	for range 3 {
		select {
		case <-accepted:
		case <-time.After(5 * time.Second):
			t.Fatal("fewer than 3 dialled")
		}
	}
	select {
	case <-accepted:
		t.Fatal("more than 3 dialled ahead")
	case <-time.After(100 * time.Millisecond):
	}
	// The transport takes them, newest first, then dials.
	for i := range 4 {
		c, err := w.DialContext(context.Background(), "tcp", w.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i == 3 {
			select {
			case <-accepted:
			case <-time.After(5 * time.Second):
				t.Fatal("the fourth connection was not dialled")
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open != 4 || len(w.idle) != 0 {
		t.Fatalf("open %d, idle %d; want 4 and 0", w.open, len(w.idle))
	}
}

// Over HTTP/2 one connection carries every call: while it is open nothing
// is dialled ahead; once it is gone, the next session opened dials again.
func TestWarmDialsNothingBesideAnHTTP2Connection(t *testing.T) {
	ln, accepted := listen(t)
	w := newTestWarm(ln)
	conn, err := w.DialContext(context.Background(), "tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	<-accepted
	w.began()
	w.answered(&http.Response{ProtoMajor: 2})
	w.Warm() // the call in flight leaves no idle connection: over HTTP/1.1 this would dial
	select {
	case <-accepted:
		t.Fatal("dialled ahead beside an HTTP/2 connection")
	case <-time.After(100 * time.Millisecond):
	}
	w.ended()
	conn.Close()
	w.Warm()
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("nothing dialled once the HTTP/2 connection was closed")
	}
}
