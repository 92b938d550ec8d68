package pgtest

import (
	"io"
	"net"
	"sync"
)

// Proxy is a TCP forwarder on a loopback port that can cut the network
// between a client and the server: Cut drops every connection and refuses
// new ones (they are closed on accept) until Heal. It stands for a network
// partition between a process and its database.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy listens on 127.0.0.1:0 and forwards to target (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// track registers c unless the network is cut.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) forward(c net.Conn) {
	defer p.wg.Done()
	up, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(up) {
		c.Close()
		if up != nil {
			up.Close()
		}
		p.untrack(c)
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	p.untrack(c)
	p.untrack(up)
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Cut closes every forwarded connection and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Heal lets connections through again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}
