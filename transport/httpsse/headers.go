package httpsse

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
)

// Request headers that decide whether a request may drive the server at
// all: Host (against DNS rebinding) and Origin (against web pages).

const (
	msgHostNotAllowed   = "Host not allowed"
	msgOriginNotAllowed = "Origin not allowed"
)

// edgeGuard admits requests by their Host and Origin headers.
//
// Host: a web page can rebind its own name to 127.0.0.1, and its requests
// then reach a loopback server as same-origin ones — but they still carry
// the page's name in Host. So when the server is bound to loopback, Host
// must be a loopback name or address (any port) or one of AllowedHosts.
// When bound to another address, any Host is accepted unless AllowedHosts
// is set; then IP addresses (never a rebound name) and the listed names.
//
// Origin: browsers send it with cross-origin requests and every POST. A
// request with an Origin that is not in AllowedOrigins is refused, so no
// web page can drive the agent unless it is listed; clients that are not
// browsers (curl, the SDKs, acp-bench) send none. Listed origins get CORS
// headers, and their preflight requests are answered.
type edgeGuard struct {
	loopbackBind bool
	anyHost      bool
	hosts        map[string]bool
	anyOrigin    bool
	origins      map[string]bool
}

func newEdgeGuard(cfg Config) *edgeGuard {
	g := &edgeGuard{loopbackBind: isLoopback(cfg.Host)}
	g.hosts, g.anyHost = allowList(cfg.AllowedHosts, normalHost)
	g.origins, g.anyOrigin = allowList(cfg.AllowedOrigins, normalOrigin)
	if !g.loopbackBind && len(g.hosts) == 0 {
		g.anyHost = true
	}
	return g
}

// allowList is the set of normalized items, and whether "*" (wildcard) is one.
func allowList(items []string, normal func(string) string) (set map[string]bool, wildcard bool) {
	set = map[string]bool{}
	for _, it := range items {
		switch it = normal(it); it {
		case "*":
			wildcard = true
		case "":
		default:
			set[it] = true
		}
	}
	return set, wildcard
}

// admit reports whether the request may go on; when not, it has answered
// it (403, or 204 to a preflight of an allowed origin).
func (g *edgeGuard) admit(ctx *fasthttp.RequestCtx) bool {
	if !g.hostAllowed(ctx.Request.Header.Host()) {
		jsonError(ctx, fasthttp.StatusForbidden, msgHostNotAllowed)
		return false
	}
	origin := ctx.Request.Header.Peek("Origin")
	if len(origin) == 0 {
		return true
	}
	if !g.originAllowed(origin) {
		jsonError(ctx, fasthttp.StatusForbidden, msgOriginNotAllowed)
		return false
	}
	h := &ctx.Response.Header
	h.Set("Access-Control-Allow-Origin", string(origin))
	h.Set("Vary", "Origin")
	h.Set("Access-Control-Expose-Headers", HeaderConnectionID+", "+HeaderSessionID)
	if ctx.IsOptions() && len(ctx.Request.Header.Peek("Access-Control-Request-Method")) > 0 {
		h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, "+HeaderConnectionID+", "+HeaderSessionID+", "+HeaderLastEventID+", "+HeaderProtocolVersion)
		h.Set("Access-Control-Max-Age", "600")
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return false
	}
	return true
}

func (g *edgeGuard) hostAllowed(hostHeader []byte) bool {
	if g.anyHost || len(hostHeader) == 0 {
		return true // no Host: HTTP/1.0, never a browser
	}
	host := normalHost(string(hostHeader))
	if g.hosts[host] || host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	return a.Unmap().IsLoopback() || !g.loopbackBind
}

func (g *edgeGuard) originAllowed(origin []byte) bool {
	return g.anyOrigin || g.origins[normalOrigin(string(origin))]
}

// normalHost is a Host header's name without port, brackets or final dot,
// in lower case.
func normalHost(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	} else {
		h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	}
	return strings.TrimSuffix(h, ".")
}

// normalOrigin is scheme://host[:port] in lower case, without a final /.
func normalOrigin(o string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(o)), "/")
}

var errLastEventID = errors.New("invalid Last-Event-ID header")

// parseLastEventID reads a Last-Event-ID header: nil when absent or blank,
// else the event id, a decimal uint64.
func parseLastEventID(raw []byte) (*uint64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, nil
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return nil, errLastEventID
	}
	return &n, nil
}
