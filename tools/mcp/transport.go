package mcp

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/iac-code/iac-code/tools"
)

var defaultChildEnv = tools.ChildEnv

// transport builds the SDK transport of the server's configuration.
func (s *Server) transport() (sdk.Transport, error) {
	switch s.cfg.Transport {
	case Stdio, "":
		return s.stdioTransport()
	case HTTP:
		return &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.httpClient()}, nil
	case SSE:
		return &sdk.SSEClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.httpClient()}, nil
	}
	return nil, fmt.Errorf("unknown transport %q", s.cfg.Transport)
}

// httpClient is the server's own client: its own connection pool (closed
// with it) and the configured headers on every request.
func (s *Server) httpClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	s.mu.Lock()
	s.httpTr = tr
	s.mu.Unlock()
	return &http.Client{Transport: &headerTransport{next: tr, headers: s.cfg.Headers}}
}

// headerTransport adds the configured headers to every request, and the
// W3C trace context of the request's span (a tool call being traced), so
// the MCP server's spans join the turn's trace.
type headerTransport struct {
	next    http.RoundTripper
	headers []Pair
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	traced := trace.SpanContextFromContext(req.Context()).IsValid()
	if len(t.headers) == 0 && !traced {
		return t.next.RoundTrip(req)
	}
	req = req.Clone(req.Context()) // a RoundTripper must not change its request
	if traced {
		propagation.TraceContext{}.Inject(req.Context(), propagation.HeaderCarrier(req.Header))
	}
	for _, h := range t.headers {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Set(h.Name, h.Value)
	}
	return t.next.RoundTrip(req)
}

// mergeEnv is base with the entry's variables set (they win).
func mergeEnv(base []string, entry []Pair) []string {
	if len(entry) == 0 {
		return base
	}
	override := make(map[string]bool, len(entry))
	for _, p := range entry {
		override[p.Name] = true
	}
	out := make([]string, 0, len(base)+len(entry))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !override[name] {
			out = append(out, kv)
		}
	}
	for _, p := range entry {
		out = append(out, p.Name+"="+p.Value)
	}
	return out
}

// envValue is the value of name in env, a "NAME=value" list (the last
// one wins).
func envValue(env []string, name string) string {
	var v string
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// lookPath finds a bare command name in the PATH of env (the server's own
// environment, the entry's PATH included); a name with a slash is used as
// is (relative to the session cwd).
func lookPath(command string, env []string) (string, error) {
	if strings.ContainsRune(command, '/') {
		return command, nil
	}
	for _, dir := range filepath.SplitList(envValue(env, "PATH")) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, command)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q not found in PATH", command)
}

// readStderr logs the server's stderr line by line and keeps its last lines
// for failure messages.
func (s *Server) readStderr(r io.ReadCloser) {
	defer close(s.stderrDone)
	defer r.Close()
	br := bufio.NewReaderSize(r, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			text := strings.TrimRight(string(line), "\r\n")
			if err == bufio.ErrBufferFull {
				text += "…"
				// skip the rest of an overlong line
				for err == bufio.ErrBufferFull {
					_, err = br.ReadSlice('\n')
				}
			}
			if text != "" {
				s.stderr.add(text)
				s.log.Info().Str("stream", "stderr").Msg(text)
			}
		}
		if err != nil {
			return
		}
	}
}

// stderrTail keeps the last lines a server wrote to stderr.
type stderrTail struct {
	mu    sync.Mutex
	lines []string
}

const stderrTailLines, stderrTailChars = 5, 300

// stderrSettle bounds the wait for a failed server's stderr to end (a
// grandchild may hold it open).
const stderrSettle = 250 * time.Millisecond

func (t *stderrTail) add(line string) {
	if len(line) > stderrTailChars {
		line = line[:stderrTailChars] + "…"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > stderrTailLines {
		t.lines = t.lines[1:]
	}
}

func (t *stderrTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, " | ")
}

// redactURL replaces rawURL in msg by its scheme, host and path: a query or
// user info may carry a credential.
func redactURL(msg, rawURL string) string {
	if rawURL == "" {
		return msg
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return strings.ReplaceAll(msg, rawURL, "<url>")
	}
	safe := (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
	msg = strings.ReplaceAll(msg, rawURL, safe)
	if u.RawQuery != "" {
		msg = strings.ReplaceAll(msg, u.RawQuery, "…")
	}
	if u.User != nil {
		msg = strings.ReplaceAll(msg, u.User.String(), "…")
	}
	return msg
}

// fileURI is the file:// URI of an absolute path.
func fileURI(path string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
}
