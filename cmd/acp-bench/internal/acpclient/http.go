package acpclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HTTP is a client of one HTTP+SSE server. POSTs share a pooled
// http.Client; every event stream is its own raw TCP connection (the server
// answers streams with "Connection: close"), read without a goroutine of
// its own.
type HTTP struct {
	Addr string // host:port
	// Token, when set, is sent as "Authorization: Bearer <Token>" on every
	// request.
	Token string
	base  string
	hc    *http.Client
}

// NewHTTP returns a client of the server at addr (a loopback host:port)
// using at most maxConns pooled connections for POST and DELETE.
func NewHTTP(addr string, maxConns int) *HTTP {
	tr := &http.Transport{
		Proxy:               nil,
		MaxConnsPerHost:     maxConns,
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
	}
	return &HTTP{Addr: addr, base: "http://" + addr, hc: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

// Close releases idle connections.
func (h *HTTP) Close() { h.hc.CloseIdleConnections() }

// StatusError is an unexpected HTTP status.
type StatusError struct {
	Op     string
	Status int
	Body   string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: HTTP %d %s", e.Op, e.Status, strings.TrimSpace(e.Body))
}

func (h *HTTP) do(ctx context.Context, method, path, conn string, body []byte) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, rd)
	if err != nil {
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if conn != "" {
		req.Header.Set("Acp-Connection-Id", conn)
	}
	if h.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.Token)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp, b, err
}

// Initialize opens an ACP connection (POST /acp initialize → 200 with
// Acp-Connection-Id) and returns its id and the initialize response body.
func (h *HTTP) Initialize(ctx context.Context) (string, []byte, error) {
	resp, body, err := h.do(ctx, http.MethodPost, "/acp", "", Initialize(1))
	if err != nil {
		return "", nil, fmt.Errorf("initialize: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", nil, &StatusError{"initialize", resp.StatusCode, string(body)}
	}
	id := resp.Header.Get("Acp-Connection-Id")
	if id == "" {
		return "", nil, errors.New("initialize: no Acp-Connection-Id header")
	}
	m := Parse(body)
	if m.Kind != KindResponse || m.ID != 1 || m.Err != nil {
		return "", nil, fmt.Errorf("initialize: bad response %s", body)
	}
	return id, body, nil
}

// Post sends one message on a connection; the server must answer 202.
func (h *HTTP) Post(ctx context.Context, conn string, msg []byte) error {
	resp, body, err := h.do(ctx, http.MethodPost, "/acp", conn, msg)
	if err != nil {
		return fmt.Errorf("POST: %w", err)
	}
	if resp.StatusCode != http.StatusAccepted {
		return &StatusError{"POST", resp.StatusCode, string(body)}
	}
	return nil
}

// Delete closes a connection (DELETE /acp → 200).
func (h *HTTP) Delete(ctx context.Context, conn string) error {
	resp, body, err := h.do(ctx, http.MethodDelete, "/acp", conn, nil)
	if err != nil {
		return fmt.Errorf("DELETE: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return &StatusError{"DELETE", resp.StatusCode, string(body)}
	}
	return nil
}

// Health checks GET /health.
func (h *HTTP) Health(ctx context.Context) error {
	resp, body, err := h.do(ctx, http.MethodGet, "/health", "", nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &StatusError{"health", resp.StatusCode, string(body)}
	}
	return nil
}

// Metrics reads GET /metrics (Prometheus text format).
func (h *HTTP) Metrics(ctx context.Context) (Metrics, error) {
	resp, body, err := h.do(ctx, http.MethodGet, "/metrics", "", nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{"metrics", resp.StatusCode, string(body)}
	}
	return ParseMetrics(body), nil
}

// Metrics maps series (name with its {labels}, if any) to values.
type Metrics map[string]float64

// ParseMetrics reads the Prometheus text exposition format (comments and
// timestamps ignored).
func ParseMetrics(b []byte) Metrics {
	m := Metrics{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		// The value follows the series, after the closing brace if any.
		rest := line
		series := ""
		if i := strings.IndexByte(line, '}'); i >= 0 {
			series, rest = line[:i+1], line[i+1:]
		} else if i := strings.IndexAny(line, " \t"); i >= 0 {
			series, rest = line[:i], line[i:]
		} else {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		m[series] = v
	}
	return m
}

// Get is the value of an unlabelled series, or the sum of every series of
// that name; ok is false when there is none.
func (m Metrics) Get(name string) (v float64, ok bool) {
	if v, ok := m[name]; ok {
		return v, true
	}
	for k, x := range m {
		if strings.HasPrefix(k, name+"{") {
			v += x
			ok = true
		}
	}
	return v, ok
}

// Event is one SSE event. Data is valid until the next call to Next.
type Event struct {
	Type  string
	Data  []byte
	ID    uint64
	HasID bool
}

// Stream is one GET /acp event stream.
type Stream struct {
	nc    net.Conn
	r     *bufio.Reader
	data  []byte
	ev    Event
	long  []byte
	Bytes int64
}

// OpenStream opens GET /acp for conn (sessionID "" = the connection
// stream), resuming after lastEventID when it is non-nil.
func (h *HTTP) OpenStream(ctx context.Context, conn, sessionID string, lastEventID *uint64) (*Stream, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", h.Addr)
	if err != nil {
		return nil, fmt.Errorf("GET: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	var req strings.Builder
	req.WriteString("GET /acp HTTP/1.1\r\nHost: ")
	req.WriteString(h.Addr)
	req.WriteString("\r\nAccept: text/event-stream\r\nAcp-Connection-Id: ")
	req.WriteString(conn)
	req.WriteString("\r\n")
	if sessionID != "" {
		req.WriteString("Acp-Session-Id: " + sessionID + "\r\n")
	}
	if h.Token != "" {
		req.WriteString("Authorization: Bearer " + h.Token + "\r\n")
	}
	if lastEventID != nil {
		req.WriteString("Last-Event-ID: " + strconv.FormatUint(*lastEventID, 10) + "\r\n")
	}
	req.WriteString("\r\n")
	if _, err := io.WriteString(nc, req.String()); err != nil {
		nc.Close()
		return nil, fmt.Errorf("GET: %w", err)
	}
	br := bufio.NewReaderSize(nc, 2048)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("GET: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		nc.Close()
		return nil, &StatusError{"GET", resp.StatusCode, string(b)}
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		nc.Close()
		return nil, fmt.Errorf("GET: Content-Type %q", ct)
	}
	_ = nc.SetDeadline(time.Time{})
	// resp.Body removes the chunked framing.
	return &Stream{nc: nc, r: bufio.NewReaderSize(resp.Body, 8192)}, nil
}

// SetReadDeadline bounds the next reads.
func (s *Stream) SetReadDeadline(t time.Time) error { return s.nc.SetReadDeadline(t) }

// Close drops the TCP connection.
func (s *Stream) Close() error { return s.nc.Close() }

// ErrStreamError is returned for an "event: error" (the server ended the
// stream with an error); the event is returned with it.
var ErrStreamError = errors.New("server sent an error event")

// Next returns the next event (comments such as ": ping" are skipped).
func (s *Stream) Next() (*Event, error) {
	s.ev = Event{}
	s.data = s.data[:0]
	hasData := false
	for {
		line, err := s.line()
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			if !hasData && s.ev.Type == "" {
				continue // blank line after a comment
			}
			s.ev.Data = s.data
			if s.ev.Type == "error" {
				return &s.ev, ErrStreamError
			}
			return &s.ev, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(field) {
		case "data":
			if hasData {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
			hasData = true
		case "event":
			if string(value) == "message" {
				s.ev.Type = "message" // no allocation on the hot path
			} else {
				s.ev.Type = string(value)
			}
		case "id":
			if n, err := strconv.ParseUint(string(value), 10, 64); err == nil {
				s.ev.ID, s.ev.HasID = n, true
			}
		}
	}
}

// line reads one line without its line ending.
func (s *Stream) line() ([]byte, error) {
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.long = append(s.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = s.r.ReadSlice('\n')
			s.long = append(s.long, line...)
		}
		line = s.long
	}
	s.Bytes += int64(len(line))
	if err != nil {
		return nil, err
	}
	return trim(line), nil
}
