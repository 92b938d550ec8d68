package httpsse

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
)

// scriptedListener returns the queued results of Accept in order.
type scriptedListener struct {
	results []any // net.Conn or error
}

func (l *scriptedListener) Accept() (net.Conn, error) {
	if len(l.results) == 0 {
		return nil, net.ErrClosed
	}
	r := l.results[0]
	l.results = l.results[1:]
	if err, ok := r.(error); ok {
		return nil, err
	}
	return r.(net.Conn), nil
}
func (l *scriptedListener) Close() error   { return nil }
func (l *scriptedListener) Addr() net.Addr { return &net.TCPAddr{} }

func opErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

func TestAcceptSurvivesResourceErrors(t *testing.T) {
	server, client := net.Pipe()
	defer client.Close()
	ln := newResilientListener(&scriptedListener{results: []any{
		opErr(syscall.ENOBUFS), opErr(syscall.ECONNABORTED), opErr(syscall.ENOMEM), server,
	}}, zerolog.Nop())
	c, err := ln.Accept()
	if err != nil || c != server {
		t.Fatalf("Accept = %v, %v; want the connection after the temporary errors", c, err)
	}
	if ln.failed.Load() != 3 {
		t.Fatalf("failed = %d, want 3", ln.failed.Load())
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a permanent error must end Accept, got %v", err)
	}
}

func TestAcceptShedsAWaitingConnectionWith503WhenOutOfDescriptors(t *testing.T) {
	shedServer, shedClient := net.Pipe()
	next, nextClient := net.Pipe()
	defer nextClient.Close()
	ln := newResilientListener(&scriptedListener{results: []any{opErr(syscall.EMFILE), shedServer, next}}, zerolog.Nop())
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(shedClient)
		got <- string(b)
	}()
	c, err := ln.Accept()
	if err != nil || c != next {
		t.Fatalf("Accept = %v, %v; want the next connection", c, err)
	}
	reply := <-got
	if !strings.HasPrefix(reply, "HTTP/1.1 503 ") || !strings.HasSuffix(reply, `{"error":"Server is out of file descriptors"}`) {
		t.Fatalf("shed connection got %q", reply)
	}
	if ln.shed.Load() != 1 || ln.spare == nil {
		t.Fatalf("shed = %d, spare taken back = %v", ln.shed.Load(), ln.spare != nil)
	}
	_ = ln.Close()
}

func TestConnectionCapFitsTheDescriptorLimit(t *testing.T) {
	c := Config{}.withDefaults()
	if c.MaxConnections > connectionBudget() || c.MaxStreams+c.StreamHeadroom > c.MaxConnections {
		t.Fatalf("cap %d streams %d+%d over the budget %d", c.MaxConnections, c.MaxStreams, c.StreamHeadroom, connectionBudget())
	}
	if limit := fileLimit(); limit > 0 && uint64(c.MaxConnections) > limit*3/4 {
		t.Fatalf("cap %d leaves less than a quarter of %d descriptors", c.MaxConnections, limit)
	}
	small := Config{MaxConnections: 100}.withDefaults()
	if small.MaxStreams != 80 || small.StreamHeadroom != 20 {
		t.Fatalf("streams %d headroom %d for 100 connections", small.MaxStreams, small.StreamHeadroom)
	}
}
