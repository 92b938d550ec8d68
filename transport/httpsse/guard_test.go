package httpsse_test

import (
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/transport/httpsse"
)

// doAs sends one request with the given Host and Origin headers ("" = the
// client's default Host, no Origin).
func (e *env) doAs(method, path, host, origin string, body string, hdr ...string) reply {
	req, err := http.NewRequest(method, e.base+path, strings.NewReader(body))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return e.roundTrip(req)
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`

var _ = Describe("the Host and Origin guard", Label("security"), func() {
	port := func(e *env) string { return e.addr[strings.LastIndexByte(e.addr, ':'):] }

	It("bound to loopback, accepts only loopback names and addresses, on any port", func() {
		e := startEnv(httpsse.Config{})
		for _, h := range []string{"", "127.0.0.1" + port(e), "localhost" + port(e), "LOCALHOST:1", "127.8.9.10", "[::1]:8765", "localhost."} {
			r := e.doAs(http.MethodPost, "/acp", h, "", initBody)
			Expect(r.status).To(Equal(http.StatusOK), h)
		}
		// what a page that rebound its name to 127.0.0.1 sends
		for _, h := range []string{"attacker.example" + port(e), "attacker.example", "localhost.attacker.example", "127.0.0.1.nip.io", "10.0.0.1", "[fe80::1]:8765"} {
			for _, path := range []string{"/acp", "/health", "/metrics"} {
				r := e.doAs(http.MethodGet, path, h, "", "")
				Expect(r.status).To(Equal(http.StatusForbidden), h+path)
				Expect(string(r.body)).To(Equal(`{"error":"Host not allowed"}`))
			}
			r := e.doAs(http.MethodPost, "/acp", h, "", initBody)
			Expect(r.status).To(Equal(http.StatusForbidden), h)
			Expect(r.header.Get("Acp-Connection-Id")).To(BeEmpty())
		}
	})

	It("accepts the names of AllowedHosts too", func() {
		e := startEnv(httpsse.Config{AllowedHosts: []string{"agent.internal", "IDE.Example"}})
		Expect(e.doAs(http.MethodPost, "/acp", "agent.internal:9000", "", initBody).status).To(Equal(http.StatusOK))
		Expect(e.doAs(http.MethodPost, "/acp", "ide.example", "", initBody).status).To(Equal(http.StatusOK))
		Expect(e.doAs(http.MethodPost, "/acp", "other.internal", "", initBody).status).To(Equal(http.StatusForbidden))
		Expect(e.doAs(http.MethodPost, "/acp", "localhost", "", initBody).status).To(Equal(http.StatusOK))
	})

	It("bound elsewhere, accepts any Host unless AllowedHosts is set; then addresses and the listed names", func() {
		e := startEnv(httpsse.Config{Host: "0.0.0.0"})
		Expect(e.doAs(http.MethodPost, "/acp", "build-box.lan:8765", "", initBody).status).To(Equal(http.StatusOK))
		e = startEnv(httpsse.Config{Host: "0.0.0.0", AllowedHosts: []string{"build-box.lan"}})
		Expect(e.doAs(http.MethodPost, "/acp", "build-box.lan:8765", "", initBody).status).To(Equal(http.StatusOK))
		Expect(e.doAs(http.MethodPost, "/acp", "10.1.2.3:8765", "", initBody).status).To(Equal(http.StatusOK))
		Expect(e.doAs(http.MethodPost, "/acp", "attacker.example", "", initBody).status).To(Equal(http.StatusForbidden))
	})

	It("refuses a request from a web page whose origin is not allowed, before anything else", func() {
		e := startEnv(httpsse.Config{Token: "s3cret"})
		for _, o := range []string{"https://attacker.example", "http://localhost:3000", "null", "http://127.0.0.1" + port(e)} {
			r := e.doAs(http.MethodPost, "/acp", "", o, initBody, "Authorization", "Bearer s3cret")
			Expect(r.status).To(Equal(http.StatusForbidden), o)
			Expect(string(r.body)).To(Equal(`{"error":"Origin not allowed"}`))
			Expect(r.header.Get("Access-Control-Allow-Origin")).To(BeEmpty())
			Expect(e.doAs(http.MethodOptions, "/acp", "", o, "", "Access-Control-Request-Method", "POST").status).
				To(Equal(http.StatusForbidden))
		}
		// no Origin: curl, SDKs
		Expect(e.doAs(http.MethodPost, "/acp", "", "", initBody, "Authorization", "Bearer s3cret").status).To(Equal(http.StatusOK))
	})

	It("lets an allowed origin in, with CORS headers and an answered preflight", func() {
		e := startEnv(httpsse.Config{AllowedOrigins: []string{"https://ide.example/"}})
		pre := e.doAs(http.MethodOptions, "/acp", "", "https://IDE.example", "", "Access-Control-Request-Method", "POST",
			"Access-Control-Request-Headers", "content-type, acp-connection-id, acp-protocol-version")
		Expect(pre.status).To(Equal(http.StatusNoContent))
		Expect(pre.header.Get("Access-Control-Allow-Origin")).To(Equal("https://IDE.example"))
		Expect(pre.header.Get("Access-Control-Allow-Methods")).To(Equal("GET, POST, DELETE"))
		allowed := strings.Split(strings.ToLower(pre.header.Get("Access-Control-Allow-Headers")), ", ")
		Expect(allowed).To(ContainElements("content-type", "acp-connection-id", "acp-protocol-version"))
		r := e.doAs(http.MethodPost, "/acp", "", "https://ide.example", initBody)
		Expect(r.status).To(Equal(http.StatusOK))
		Expect(r.header.Get("Access-Control-Allow-Origin")).To(Equal("https://ide.example"))
		Expect(r.header.Get("Access-Control-Expose-Headers")).To(ContainSubstring("Acp-Connection-Id"))
		Expect(r.header.Get("Acp-Connection-Id")).NotTo(BeEmpty())
		Expect(e.doAs(http.MethodPost, "/acp", "", "https://ide.example.attacker.example", initBody).status).To(Equal(http.StatusForbidden))
	})
})
