package httpsse

import (
	"errors"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Backoff of Accept after a resource error (as net/http does).
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
	// acceptLogEvery rate-limits the warning about failing accepts.
	acceptLogEvery = 10 * time.Second
)

// overloadReply answers a connection accepted only to be shed.
var overloadReply = func() []byte {
	body := `{"error":"Server is out of file descriptors"}`
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\nRetry-After: 1\r\n\r\n" + body)
}()

// resilientListener keeps a server accepting when the process runs out of
// descriptors or kernel buffers. fasthttp's Serve returns, and the server
// used to exit, on any accept error that is not a timeout; "too many open
// files" is not permanent. Accept retries such errors with backoff, and on
// EMFILE/ENFILE it frees a reserved descriptor to accept the waiting
// connection and answer it 503 at once, instead of leaving clients hanging
// in the backlog.
type resilientListener struct {
	net.Listener
	log     zerolog.Logger
	mu      sync.Mutex
	spare   *os.File // reserved descriptor (EMFILE trick), nil when spent
	closed  bool
	failed  atomic.Int64
	lastLog time.Time
	// shed counts connections answered 503 for lack of descriptors.
	shed atomic.Int64
}

func newResilientListener(ln net.Listener, log zerolog.Logger) *resilientListener {
	l := &resilientListener{Listener: ln, log: log}
	l.spare, _ = os.Open(os.DevNull)
	return l
}

func (l *resilientListener) Accept() (net.Conn, error) {
	delay := time.Duration(0)
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			l.reserve()
			return c, nil
		}
		if !temporaryAcceptError(err) {
			return nil, err
		}
		l.failed.Add(1)
		if time.Since(l.lastLog) >= acceptLogEvery {
			l.lastLog = time.Now()
			l.log.Warn().Err(err).Int64("failed_accepts", l.failed.Load()).Int64("shed", l.shed.Load()).
				Msg("accept failed for lack of resources; backing off and serving on")
		}
		if isFDExhaustion(err) && l.shedOne() {
			continue
		}
		delay = min(max(2*delay, acceptBackoffMin), acceptBackoffMax)
		time.Sleep(delay)
	}
}

// shedOne spends the reserved descriptor on the connection waiting in the
// backlog: accept it, answer 503, close it. It reports whether it did.
func (l *resilientListener) shedOne() bool {
	l.mu.Lock()
	spare := l.spare
	l.spare = nil
	l.mu.Unlock()
	if spare == nil {
		return false
	}
	_ = spare.Close()
	c, err := l.Listener.Accept()
	if err != nil {
		return false
	}
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write(overloadReply)
	_ = c.Close()
	l.shed.Add(1)
	l.reserve()
	return true
}

// reserve takes the spare descriptor back when it was spent.
func (l *resilientListener) reserve() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spare == nil && !l.closed {
		l.spare, _ = os.Open(os.DevNull)
	}
}

// Close closes the listener once: Shutdown closes it before fasthttp's
// Shutdown does (see Edge.serveMu), which must not report an error for it.
func (l *resilientListener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	if l.spare != nil {
		_ = l.spare.Close()
		l.spare = nil
	}
	l.closed = true
	l.mu.Unlock()
	return l.Listener.Close()
}

// temporaryAcceptError: out of descriptors or buffers, or a connection that
// was reset before we took it. Accepting later works.
func temporaryAcceptError(err error) bool {
	return isFDExhaustion(err) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPROTO)
}

func isFDExhaustion(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
