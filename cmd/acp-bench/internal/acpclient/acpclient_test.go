package acpclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	up := Parse([]byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"1@2|"}}}}`))
	if up.Kind != KindUpdate || !IsMessageChunk(up.Data) {
		t.Fatalf("%+v", up)
	}
	resp := Parse([]byte(`{"jsonrpc":"2.0","id":7,"result":{"stopReason":"end_turn"}}`))
	if resp.Kind != KindResponse || resp.ID != 7 || StopReason(resp.Result) != "end_turn" {
		t.Fatalf("%+v", resp)
	}
	e := Parse([]byte(`{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Invalid params"}}`))
	if e.Kind != KindResponse || e.Err == nil || e.Err.Code != -32602 {
		t.Fatalf("%+v", e)
	}
	req := Parse([]byte(`{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{}}`))
	if req.Kind != KindRequest || req.ID != 0 {
		t.Fatalf("%+v", req)
	}
	if n := Parse([]byte(`{"jsonrpc":"2.0","method":"x"}`)); n.Kind != KindNotification {
		t.Fatalf("%+v", n)
	}
	if o := Parse([]byte(`not json`)); o.Kind != KindOther {
		t.Fatalf("%+v", o)
	}
	if sid, err := SessionID([]byte(`{"sessionId":"abc"}`)); err != nil || sid != "abc" {
		t.Fatal(sid, err)
	}
}

func TestParseMetrics(t *testing.T) {
	m := ParseMetrics([]byte("# HELP x\n# TYPE x counter\ngo_goroutines 12\nreq{route=\"a b\",code=\"200\"} 3\nreq{route=\"c\"} 4 1700000000\nbad line\n"))
	if v, ok := m.Get("go_goroutines"); !ok || v != 12 {
		t.Fatal(v, ok)
	}
	if v, ok := m.Get("req"); !ok || v != 7 {
		t.Fatal(v, ok)
	}
	if _, ok := m.Get("missing"); ok {
		t.Fatal("missing metric found")
	}
}

func TestStdioReadUntil(t *testing.T) {
	out := strings.NewReader("\n" + `{"jsonrpc":"2.0","method":"session/update","params":{}}` + "\n" +
		`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n" + `{"jsonrpc":"2.0","id":2,"result":{"ok":true}}` + "\n")
	c := NewStdio(io.Discard, out)
	var seen int
	m, err := c.ReadUntil(2, func(*Msg) { seen++ })
	if err != nil || m.ID != 2 || seen != 2 {
		t.Fatalf("%v %+v seen %d", err, m, seen)
	}
	if _, err := c.ReadUntil(3, nil); err == nil {
		t.Fatal("EOF not reported")
	}
}

// sseServer answers one raw GET with the given SSE body (chunked).
func sseServer(t *testing.T, status string, body string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			l, err := br.ReadString('\n')
			if err != nil || l == "\r\n" {
				break
			}
		}
		fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n", status)
		// Split the body across chunks in awkward places.
		for len(body) > 0 {
			n := min(7, len(body))
			fmt.Fprintf(c, "%x\r\n%s\r\n", n, body[:n])
			body = body[n:]
		}
		fmt.Fprint(c, "0\r\n\r\n")
	}()
	return ln.Addr().String()
}

func TestStreamEvents(t *testing.T) {
	addr := sseServer(t, "200 OK", ": ping\n\nevent: message\ndata: {\"a\":1}\nid: 5\nretry: 5000\n\n"+
		"event: message\ndata: line1\ndata: line2\nid: 6\n\nevent: error\ndata: {\"e\":1}\n\n")
	h := NewHTTP(addr, 1)
	last := uint64(4)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := h.OpenStream(ctx, "conn", "sess", &last)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ev, err := st.Next()
	if err != nil || ev.Type != "message" || string(ev.Data) != `{"a":1}` || !ev.HasID || ev.ID != 5 {
		t.Fatalf("%v %+v", err, ev)
	}
	ev, err = st.Next()
	if err != nil || string(ev.Data) != "line1\nline2" || ev.ID != 6 {
		t.Fatalf("%v %+v", err, ev)
	}
	ev, err = st.Next()
	if !errors.Is(err, ErrStreamError) || string(ev.Data) != `{"e":1}` {
		t.Fatalf("%v %+v", err, ev)
	}
	if _, err := st.Next(); err == nil {
		t.Fatal("end of stream not reported")
	}
}

func TestStreamStatus(t *testing.T) {
	addr := sseServer(t, "400 Bad Request", `{"error":"Connection not found"}`)
	h := NewHTTP(addr, 1)
	_, err := h.OpenStream(context.Background(), "x", "", nil)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 400 || !strings.Contains(se.Body, "Connection not found") {
		t.Fatalf("%v", err)
	}
}
