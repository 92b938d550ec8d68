package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	htmltomarkdown "github.com/JohannesKaufmann/html-to-markdown/v2"
	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
	"golang.org/x/net/html/charset"
	"golang.org/x/net/idna"
)

// NameWebFetch is the web_fetch tool's name.
const NameWebFetch = "web_fetch"

// EnvWebFetchAllowPrivate, set to 1, lets web_fetch reach loopback, private,
// link-local and other non-public addresses.
const EnvWebFetchAllowPrivate = "IAC_CODE_WEB_FETCH_ALLOW_PRIVATE"

// WebFetch downloads a URL and returns it as text (HTML as markdown).
//
// Only http and https are fetched, without proxies. Every connection's
// resolved address is checked when it is dialled (so redirects and DNS
// rebinding cannot bypass it) and refused when it is not public: loopback,
// RFC 1918 / unique-local private, link-local (169.254.0.0/16, fe80::/10,
// the cloud metadata address 169.254.169.254), shared/CGNAT 100.64.0.0/10
// (e.g. 100.100.100.200), unspecified, "this network" 0.0.0.0/8,
// multicast and broadcast — unless IAC_CODE_WEB_FETCH_ALLOW_PRIVATE=1.
type WebFetch struct{ Limits Limits }

func (WebFetch) Name() string { return NameWebFetch }
func (t WebFetch) Description() string {
	l := t.Limits.WithDefaults()
	return fmt.Sprintf("Fetch a URL (http or https) and return its content as text: HTML pages are converted to markdown, "+
		"other text (JSON, plain text, XML, …) is returned as is, binary content is refused. Follows up to %d redirects; "+
		"downloads at most %d MiB within %d s. Private, loopback and link-local addresses are refused. "+
		"max_length truncates the returned text (in characters).",
		l.FetchMaxRedirects, l.FetchMaxBytes>>20, int(l.FetchTimeout/time.Second))
}
func (WebFetch) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"url":{"type":"string","description":"The http(s) URL to fetch"},` +
		`"max_length":{"type":"integer","minimum":1,"description":"Truncate the returned text to this many characters"}},` +
		`"required":["url"],"additionalProperties":false}`)
}
func (WebFetch) Kind() Kind     { return KindFetch }
func (WebFetch) ReadOnly() bool { return true }

type webFetchInput struct {
	URL       *string `json:"url"`
	MaxLength *int    `json:"max_length"`
}

// errBlockedAddress is returned when a dial targets a non-public address.
type errBlockedAddress struct {
	addr   netip.Addr
	reason string
}

func (e *errBlockedAddress) Error() string {
	return fmt.Sprintf("address %s is %s; fetching non-public addresses is not allowed", e.addr, e.reason)
}

var blockedPrefixes = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "in the \"this network\" range"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (CGNAT) address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
}

// checkPublicAddr refuses every address that is not a public unicast one.
func checkPublicAddr(a netip.Addr) error {
	a = a.Unmap()
	reason := ""
	switch {
	case !a.IsValid():
		reason = "invalid"
	case a.IsUnspecified():
		reason = "unspecified"
	case a.IsLoopback():
		reason = "a loopback address"
	case a.IsPrivate():
		reason = "a private address"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		reason = "a link-local address"
	case a.IsMulticast(), a.IsInterfaceLocalMulticast():
		reason = "a multicast address"
	case a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		reason = "the broadcast address"
	default:
		for _, b := range blockedPrefixes {
			if b.prefix.Contains(a) {
				reason = b.reason
				break
			}
		}
	}
	if reason == "" {
		return nil
	}
	return &errBlockedAddress{addr: a, reason: reason}
}

func allowPrivateFetch() bool { return os.Getenv(EnvWebFetchAllowPrivate) == "1" }

func (t WebFetch) client(l Limits) *http.Client {
	allow := allowPrivateFetch()
	dialer := &net.Dialer{
		Timeout: 10 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			if allow {
				return nil
			}
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			a, err := netip.ParseAddr(host)
			if err != nil {
				return fmt.Errorf("unexpected dial address %q", address)
			}
			return checkPublicAddr(a)
		},
	}
	transport := &http.Transport{
		Proxy:                  nil, // a proxy would fetch private addresses for us
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  l.FetchTimeout,
		MaxResponseHeaderBytes: 1 << 20,
		DisableKeepAlives:      true,
	}
	return &http.Client{
		Transport: transport,
		Timeout:   l.FetchTimeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > l.FetchMaxRedirects {
				return fmt.Errorf("stopped after %d redirects", l.FetchMaxRedirects)
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("redirect to unsupported scheme %q", req.URL.Scheme)
			}
			if !sameHost(req.URL, via[0].URL) {
				// Permission was given for one host: another host is
				// reported to the model, not fetched (see Run).
				return http.ErrUseLastResponse
			}
			return checkLiteralHost(req.URL, allow)
		},
	}
}

// checkLiteralHost refuses a URL whose host is a non-public IP literal
// before anything is dialled (the dial-time check covers names).
func checkLiteralHost(u *url.URL, allow bool) error {
	if allow {
		return nil
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		return checkPublicAddr(a)
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return &errBlockedAddress{addr: netip.AddrFrom4([4]byte{127, 0, 0, 1}), reason: "a loopback address (localhost)"}
	}
	return nil
}

type webFetchCall struct {
	t         WebFetch
	url       *url.URL
	host      string // ASCII, lower case
	maxLength *int
}

func (t WebFetch) Prepare(_ *Env, input json.RawMessage) (Call, error) {
	var in webFetchInput
	if err := decodeInput(NameWebFetch, input, &in); err != nil {
		return nil, err
	}
	if err := requireString(NameWebFetch, "url", in.URL); err != nil {
		return nil, err
	}
	if in.MaxLength != nil && *in.MaxLength < 1 {
		return nil, inputError(NameWebFetch, "field 'max_length' must be >= 1")
	}
	raw := strings.TrimSpace(*in.URL)
	u, err := url.Parse(raw)
	if err != nil {
		return nil, inputError(NameWebFetch, fmt.Sprintf("invalid URL %q", raw))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, inputError(NameWebFetch, fmt.Sprintf("unsupported URL scheme %q (only http and https)", u.Scheme))
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, inputError(NameWebFetch, fmt.Sprintf("invalid URL %q (no host)", raw))
	}
	if u.User != nil {
		// user:password@ can make a URL look like another host's.
		return nil, inputError(NameWebFetch, "URLs with a user name or password (user@host) are not supported")
	}
	host, err := asciiHost(u.Hostname())
	if err != nil {
		return nil, inputError(NameWebFetch, fmt.Sprintf("invalid host %q: %v", u.Hostname(), err))
	}
	// The request goes to the host as shown (ASCII).
	port := u.Port()
	u.Host = host
	if strings.Contains(host, ":") {
		u.Host = "[" + host + "]"
	}
	if port != "" {
		u.Host += ":" + port
	}
	if err := checkLiteralHost(u, allowPrivateFetch()); err != nil {
		return nil, fmt.Errorf("Refused to fetch %s: %v", raw, err)
	}
	return &webFetchCall{t: t, url: u, host: host, maxLength: in.MaxLength}, nil
}

// hostProfile maps host names for lookup like browsers do, but lets
// through the underscores some real host names have.
var hostProfile = idna.New(idna.MapForLookup(), idna.Transitional(false), idna.StrictDomainName(false), idna.BidiRule())

// asciiHost is the host as DNS sees it: IDNA (punycode, so look-alike
// letters show as xn--…), lower case, without a final dot.
func asciiHost(h string) (string, error) {
	if _, err := netip.ParseAddr(h); err == nil {
		return strings.ToLower(h), nil
	}
	a, err := hostProfile.ToASCII(strings.TrimSuffix(h, "."))
	if err != nil {
		return "", err
	}
	return strings.ToLower(a), nil
}

// Title names the host the request goes to, then the URL.
func (c *webFetchCall) Title() string {
	return "Fetch from " + c.host + ": " + printable(c.url.String(), titleMaxRunes)
}
func (c *webFetchCall) Locations() []Location { return nil }
func (c *webFetchCall) Access() Access        { return Access{Host: c.host} }

func (c *webFetchCall) Run(ctx context.Context, _ func(string)) Result {
	t, u, raw := c.t, c.url, c.url.String()
	l := t.Limits.WithDefaults()
	client := t.client(l)
	defer client.CloseIdleConnections()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return InvalidInput(NameWebFetch, err.Error())
	}
	req.Header.Set("User-Agent", "iac-code web_fetch (+https://github.com/iac-code/iac-code)")
	req.Header.Set("Accept", "text/html,application/xhtml+xml,text/markdown,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5")
	resp, err := client.Do(req)
	if err != nil {
		var blocked *errBlockedAddress
		switch {
		case errors.As(err, &blocked):
			return Errorf(fmt.Sprintf("Refused to fetch %s: %v", raw, blocked))
		case ctx.Err() != nil:
			return Errorf("web_fetch cancelled")
		}
		return Errorf(fmt.Sprintf("Fetching %s failed: %v", raw, unwrapURLError(err)))
	}
	defer resp.Body.Close()
	if loc, err := resp.Location(); err == nil && resp.StatusCode >= 300 && resp.StatusCode < 400 && !sameHost(loc, resp.Request.URL) {
		return Result{
			Output: fmt.Sprintf("URL: %s\nStatus: %s\n\nRedirected to another host: %s\nIt was not followed; call web_fetch with that URL to fetch it.",
				resp.Request.URL, resp.Status, loc),
			Raw: map[string]any{"url": resp.Request.URL.String(), "status": resp.StatusCode, "redirect": loc.String()},
		}
	}

	body, err := io.ReadAll(io.LimitReader(resp.Body, l.FetchMaxBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return Errorf("web_fetch cancelled")
		}
		return Errorf(fmt.Sprintf("Fetching %s failed while reading the body: %v", raw, unwrapURLError(err)))
	}
	capped := int64(len(body)) > l.FetchMaxBytes
	if capped {
		body = body[:l.FetchMaxBytes]
	}
	final := resp.Request.URL.String()

	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = http.DetectContentType(body)
	}
	mediaType, params, err := mime.ParseMediaType(ct)
	if err != nil {
		mediaType = strings.ToLower(strings.TrimSpace(strings.SplitN(ct, ";", 2)[0]))
	}
	var text string
	switch {
	case isHTMLType(mediaType):
		html := decodeCharset(body, ct, true)
		md, err := htmltomarkdown.ConvertString(html, converter.WithDomain(final), converter.WithContext(ctx))
		if err != nil {
			return Errorf(fmt.Sprintf("Converting %s to markdown failed: %v", final, err))
		}
		text = md
	case isTextType(mediaType):
		if bytes.IndexByte(body, 0) >= 0 {
			return Errorf(fmt.Sprintf("Refused %s: the content (%s) looks binary", final, mediaType))
		}
		if cs := params["charset"]; cs != "" && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
			text = decodeCharset(body, ct, false)
		} else {
			text = strings.ToValidUTF8(string(body), "\uFFFD")
		}
	default:
		return Errorf(fmt.Sprintf("Refused %s: binary content (%s) cannot be returned as text", final, mediaType))
	}

	var b strings.Builder
	fmt.Fprintf(&b, "URL: %s\nStatus: %s\nContent-Type: %s\n\n", final, resp.Status, mediaType)
	if c.maxLength != nil {
		if n := utf8.RuneCountInString(text); n > *c.maxLength {
			text = text[:byteOffsetOfRune(text, *c.maxLength)] +
				fmt.Sprintf("\n\n[Truncated to max_length=%d of %d characters]", *c.maxLength, n)
		}
	}
	b.WriteString(text)
	if capped {
		fmt.Fprintf(&b, "\n\n[The download was capped at %d MiB; the rest of the content is missing]", l.FetchMaxBytes>>20)
	}
	return Result{
		Output:  b.String(),
		IsError: resp.StatusCode >= 400,
		Raw:     map[string]any{"url": final, "status": resp.StatusCode, "contentType": mediaType, "bytes": len(body), "capped": capped},
	}
}

// sameHost compares the hosts of two URLs as DNS sees them.
func sameHost(a, b *url.URL) bool {
	ha, errA := asciiHost(a.Hostname())
	hb, errB := asciiHost(b.Hostname())
	return errA == nil && errB == nil && ha == hb
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func isHTMLType(mt string) bool {
	return mt == "text/html" || mt == "application/xhtml+xml"
}

func isTextType(mt string) bool {
	if strings.HasPrefix(mt, "text/") {
		return true
	}
	switch mt {
	case "application/json", "application/ld+json", "application/xml", "application/javascript",
		"application/x-javascript", "application/ecmascript", "application/yaml", "application/x-yaml",
		"application/toml", "application/x-sh", "application/x-shellscript", "application/graphql",
		"application/sql", "application/x-ndjson", "application/rss+xml", "application/atom+xml":
		return true
	}
	return strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml")
}

// decodeCharset converts body to UTF-8 using the declared charset (and, for
// HTML, <meta> declarations and sniffing).
func decodeCharset(body []byte, contentType string, html bool) string {
	var r io.Reader
	var err error
	if html {
		r, err = charset.NewReader(bytes.NewReader(body), contentType)
	} else {
		_, params, perr := mime.ParseMediaType(contentType)
		if perr != nil {
			return strings.ToValidUTF8(string(body), "\uFFFD")
		}
		r, err = charset.NewReaderLabel(params["charset"], bytes.NewReader(body))
	}
	if err != nil {
		return strings.ToValidUTF8(string(body), "\uFFFD")
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return strings.ToValidUTF8(string(body), "\uFFFD")
	}
	return strings.ToValidUTF8(string(out), "\uFFFD")
}
