package actors

import "sync"

// maxFreeFrames bounds the buffers a framePool keeps. When the model is
// faster than the client reads, dozens of frames wait in the writer's
// queue and come back together: with 4 kept, 31 % of a fast stdio
// stream's frames found one; with 32, 78–83 %.
const maxFreeFrames = 32

// framePool keeps the chunk frames of one model call that came back from
// the outlet once written (Frame.Written), for the call's next frames. A
// frame is an exact-size copy of the notification (the call builds the
// next one in its scratch buffer meanwhile); fresh each time, the copies
// grow the heap until a GC cycle frees them, and each page of it is
// faulted in once (issue 30: ~20 % of the page faults of a fast stdio
// stream). The stdio writer gives frames back; HTTP streams keep theirs
// for a resume and never do, so there the pool stays empty.
type framePool struct {
	mu   sync.Mutex
	free [maxFreeFrames][]byte
	n    int
	// closed: the call is over; what comes back is let go.
	closed bool
}

// get is a buffer of at least n bytes' capacity, nil when none came back.
func (p *framePool) get(n int) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.n {
		if b := p.free[i]; cap(b) >= n {
			p.n--
			p.free[i], p.free[p.n] = p.free[p.n], nil
			return b[:0]
		}
	}
	return nil
}

// put takes b back; when full it keeps the larger buffers (one fits more
// frames), and none larger than a call's scratch buffer.
func (p *framePool) put(b []byte) {
	if cap(b) > maxScratch {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if p.n < maxFreeFrames {
		p.free[p.n] = b
		p.n++
		return
	}
	small := 0
	for i := 1; i < p.n; i++ {
		if cap(p.free[i]) < cap(p.free[small]) {
			small = i
		}
	}
	if cap(b) > cap(p.free[small]) {
		p.free[small] = b
	}
}

// close lets the buffers go (the call is over; frames still queued come
// back to nobody).
func (p *framePool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	clear(p.free[:p.n])
	p.n = 0
}
