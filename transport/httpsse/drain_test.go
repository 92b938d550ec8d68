package httpsse_test

import (
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/transport/httpsse"
)

var _ = Describe("the drain (SIGTERM)", func() {
	It("answers /ready 200, then 503 draining while /health stays 200, refuses new connections only, and keeps serving the others on the open listener", func() {
		e := startEnv(httpsse.Config{Token: "s3cret"})
		r := e.do(http.MethodGet, "/ready", nil)
		Expect(r.status).To(Equal(http.StatusOK), "no credentials needed")
		Expect(string(r.body)).To(Equal(`{"status":"ready"}`))
		Expect(e.do(http.MethodPost, "/ready", nil).status).To(Equal(http.StatusMethodNotAllowed))
		req, err := http.NewRequest(http.MethodGet, e.base+"/ready", nil)
		Expect(err).NotTo(HaveOccurred())
		req.Host = "evil.example"
		Expect(e.roundTrip(req).status).To(Equal(http.StatusForbidden), "the Host check applies as for /health")
		auth := []string{"Authorization", "Bearer s3cret"}
		conn := e.initialize(auth...)
		s := e.stream(conn, auth...)
		defer s.close()

		e.edge.Drain(time.Second) // no mesh: nothing to hand over, returns at once

		r = e.do(http.MethodGet, "/ready", nil)
		Expect(r.status).To(Equal(http.StatusServiceUnavailable))
		Expect(string(r.body)).To(Equal(`{"status":"draining"}`))
		r = e.do(http.MethodGet, "/health", nil)
		Expect(r.status).To(Equal(http.StatusOK))
		Expect(string(r.body)).To(Equal(`{"status":"healthy"}`))

		r = e.post(rpc(1, "initialize", map[string]any{"protocolVersion": 1, "capabilities": map[string]any{},
			"clientInfo": map[string]any{"name": "test", "version": "1.0"}}), auth...)
		Expect(r.status).To(Equal(http.StatusServiceUnavailable))
		Expect(r.json()["error"]).To(ContainSubstring("draining"))
		Expect(r.header.Get("Retry-After")).To(Equal("1"))
		Expect(r.header.Get("Acp-Connection-Id")).To(BeEmpty())
		Expect(string(e.do(http.MethodGet, "/metrics", nil, auth...).body)).To(ContainSubstring(`route="ready"`))

		// The connection opened before goes on: a session and its answer.
		sid := e.newSession(conn, s, 2, auth...)
		Expect(sid).NotTo(BeEmpty())
	})
})
