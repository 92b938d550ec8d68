package tools_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/tools"
)

func newFetchServer(hits *atomic.Int32) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html><head><title>T</title><style>body{color:red}</style></head><body>
<h1>Main Title</h1><p>Hello <strong>world</strong>, see <a href="/docs/x">the docs</a>.</p>
<ul><li>one</li><li>two</li></ul><script>alert("evil")</script></body></html>`)
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/page", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, strings.Repeat("abcdefghij", 500))
	})
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"a": [1, 2]}`)
	})
	mux.HandleFunc("/png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG\r\n\x1a\n\x00\x00"))
	})
	mux.HandleFunc("/latin1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=iso-8859-1")
		w.Write([]byte("caf\xe9"))
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nothing here", http.StatusNotFound)
	})
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		mux.ServeHTTP(w, r)
	}))
}

var _ = Describe("web_fetch", func() {
	var srv *httptest.Server
	var hits atomic.Int32
	BeforeEach(func() {
		hits.Store(0)
		srv = newFetchServer(&hits)
		DeferCleanup(srv.Close)
	})

	Context("with IAC_CODE_WEB_FETCH_ALLOW_PRIVATE=1", func() {
		BeforeEach(func() { GinkgoT().Setenv(tools.EnvWebFetchAllowPrivate, "1") })

		It("converts HTML to markdown", func() {
			res := run(tools.WebFetch{}, nil, map[string]any{"url": srv.URL + "/page"})
			Expect(res.IsError).To(BeFalse(), res.Output)
			Expect(res.Output).To(ContainSubstring("# Main Title"))
			Expect(res.Output).To(ContainSubstring("Hello **world**, see [the docs](" + srv.URL + "/docs/x)."))
			Expect(res.Output).To(ContainSubstring("- one"))
			Expect(res.Output).NotTo(ContainSubstring("evil"))
			Expect(res.Output).NotTo(ContainSubstring("color:red"))
			Expect(res.Output).To(HavePrefix("URL: " + srv.URL + "/page\nStatus: 200 OK\nContent-Type: text/html\n"))
		})

		It("follows redirects and reports the final URL", func() {
			res := run(tools.WebFetch{}, nil, map[string]any{"url": srv.URL + "/redirect"})
			Expect(res.IsError).To(BeFalse(), res.Output)
			Expect(res.Output).To(HavePrefix("URL: " + srv.URL + "/page\n"))
			Expect(res.Output).To(ContainSubstring("# Main Title"))
		})

		It("stops after too many redirects", func() {
			res := run(tools.WebFetch{}, nil, map[string]any{"url": srv.URL + "/loop"})
			Expect(res.IsError).To(BeTrue())
			Expect(res.Output).To(ContainSubstring("stopped after 10 redirects"))
			Expect(hits.Load()).To(BeNumerically("==", 11))
		})

		It("caps the download size with a note", func() {
			res := run(tools.WebFetch{Limits: tools.Limits{FetchMaxBytes: 1000}}, nil, map[string]any{"url": srv.URL + "/big"})
			Expect(res.IsError).To(BeFalse())
			Expect(res.Output).To(ContainSubstring(strings.Repeat("abcdefghij", 100) + "\n\n[The download was capped"))
			Expect(res.Output).NotTo(ContainSubstring(strings.Repeat("abcdefghij", 101)))
		})

		It("truncates to max_length with a note", func() {
			res := run(tools.WebFetch{}, nil, map[string]any{"url": srv.URL + "/big", "max_length": 25})
			Expect(res.Output).To(HaveSuffix("\n\nabcdefghijabcdefghijabcde\n\n[Truncated to max_length=25 of 5000 characters]"))
		})

		It("returns other text as is, decodes charsets, refuses binary and flags HTTP errors", func() {
			res := run(tools.WebFetch{}, nil, map[string]any{"url": srv.URL + "/json"})
			Expect(res.Output).To(HaveSuffix("\n\n" + `{"a": [1, 2]}`))
			res = run(tools.WebFetch{}, nil, map[string]any{"url": srv.URL + "/latin1"})
			Expect(res.Output).To(HaveSuffix("café"))
			res = run(tools.WebFetch{}, nil, map[string]any{"url": srv.URL + "/png"})
			Expect(res.IsError).To(BeTrue())
			Expect(res.Output).To(ContainSubstring("binary content (image/png)"))
			res = run(tools.WebFetch{}, nil, map[string]any{"url": srv.URL + "/missing"})
			Expect(res.IsError).To(BeTrue())
			Expect(res.Output).To(ContainSubstring("404 Not Found"))
			Expect(res.Output).To(ContainSubstring("nothing here"))
		})
	})

	Context("by default", func() {
		BeforeEach(func() { GinkgoT().Setenv(tools.EnvWebFetchAllowPrivate, "") })

		DescribeTable("refuses non-public addresses fast, without network",
			func(url, reason string) {
				start := time.Now()
				res := run(tools.WebFetch{}, nil, map[string]any{"url": url})
				Expect(time.Since(start)).To(BeNumerically("<", time.Second))
				Expect(res.IsError).To(BeTrue())
				Expect(res.Output).To(HavePrefix("Refused to fetch"))
				Expect(res.Output).To(ContainSubstring(reason))
			},
			Entry("cloud metadata", "http://169.254.169.254/latest/meta-data/", "link-local"),
			Entry("loopback", "http://127.0.0.1:9/", "loopback"),
			Entry("localhost", "http://localhost:9/", "loopback"),
			Entry("IPv6 loopback", "http://[::1]:9/", "loopback"),
			Entry("IPv4-mapped IPv6", "http://[::ffff:169.254.169.254]/", "link-local"),
			Entry("RFC 1918", "http://10.1.2.3/", "private"),
			Entry("unique local", "http://[fd00::1]/", "private"),
			Entry("link-local v6", "http://[fe80::1]/", "link-local"),
			Entry("unspecified", "http://0.0.0.0/", "unspecified"),
			Entry("CGNAT metadata", "http://100.100.100.200/", "shared"),
		)

		It("refuses the local test server", func() {
			res := run(tools.WebFetch{}, nil, map[string]any{"url": srv.URL + "/page"})
			Expect(res.IsError).To(BeTrue())
			Expect(res.Output).To(ContainSubstring("loopback"))
			Expect(hits.Load()).To(BeZero())
		})

		It("checks the resolved address when dialling, not only the URL", func() {
			host, err := os.Hostname()
			Expect(err).NotTo(HaveOccurred())
			addrs, err := net.LookupHost(host)
			if err != nil || len(addrs) == 0 || strings.EqualFold(host, "localhost") {
				Skip("the host name does not resolve locally")
			}
			for _, a := range addrs {
				ip := net.ParseIP(a)
				if ip == nil || !(ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast()) {
					Skip("the host name resolves to a public address")
				}
			}
			_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
			start := time.Now()
			res := run(tools.WebFetch{}, nil, map[string]any{"url": "http://" + host + ":" + port + "/page"})
			Expect(time.Since(start)).To(BeNumerically("<", 2*time.Second))
			Expect(res.IsError).To(BeTrue())
			Expect(res.Output).To(HavePrefix("Refused to fetch"))
			Expect(hits.Load()).To(BeZero())
		})
	})
})
