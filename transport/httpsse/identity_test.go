package httpsse_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/fasthttp/websocket"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/transport/auth"
	"github.com/iac-code/iac-code/transport/httpsse"
)

func usersChain(kv ...string) *auth.Chain {
	return usersChainAt(filepath.Join(GinkgoT().TempDir(), "users.yaml"), kv...)
}

func usersChainAt(path string, kv ...string) *auth.Chain {
	writeUsers(path, kv...)
	f, err := auth.LoadTokenFile(path, zerolog.Nop())
	Expect(err).NotTo(HaveOccurred())
	return &auth.Chain{File: f}
}

func writeUsers(path string, kv ...string) {
	y := "users:\n"
	for i := 0; i+1 < len(kv); i += 2 {
		sum := sha256.Sum256([]byte(kv[i+1]))
		y += "  - name: " + kv[i] + "\n    token_sha256: \"" + hex.EncodeToString(sum[:]) + "\"\n"
	}
	Expect(os.WriteFile(path+".tmp", []byte(y), 0o600)).To(Succeed())
	Expect(os.Rename(path+".tmp", path)).To(Succeed())
}

var _ = Describe("identities", func() {
	const tokA, tokB = "token-of-alice", "token-of-bob"
	asA := []string{"Authorization", "Bearer " + tokA}
	asB := []string{"Authorization", "Bearer " + tokB}

	It("decides the principal per request: 401 without a known token, 403 and nothing executed on another's connection", func() {
		e := startEnv(httpsse.Config{Auth: usersChain("alice", tokA, "bob", tokB)})
		r := e.post(rpc(1, "initialize", map[string]any{"protocolVersion": 1}))
		Expect(r.status).To(Equal(http.StatusUnauthorized))
		Expect(r.header.Get("WWW-Authenticate")).To(Equal(`Bearer realm="iac-code"`))
		Expect(e.post(rpc(1, "initialize", map[string]any{"protocolVersion": 1}), "Authorization", "Bearer nope").status).
			To(Equal(http.StatusUnauthorized))

		conn := e.initialize(asA...)
		s := e.stream(conn, asA...)
		r = e.post(rpc(2, "session/new", map[string]any{"cwd": e.cwd}), append([]string{"Acp-Connection-Id", conn}, asB...)...)
		Expect(r.status).To(Equal(http.StatusForbidden))
		Expect(r.json()["error"]).To(ContainSubstring("another user"))
		resp, cancel := e.getStream(conn, asB...)
		cancel()
		Expect(resp.StatusCode).To(Equal(http.StatusForbidden))
		Expect(e.do(http.MethodDelete, "/acp", nil, append([]string{"Acp-Connection-Id", conn}, asB...)...).status).
			To(Equal(http.StatusForbidden))

		e.send(conn, rpc(3, "session/list", map[string]any{}), asA...)
		evs := s.until(isResponse(3))
		for _, ev := range evs {
			Expect(ev.msg["id"]).NotTo(BeEquivalentTo(2), "B's request was not executed")
		}
		Expect(e.logs.String()).To(ContainSubstring(`"outcome":"forbidden"`))
		Expect(e.logs.String()).NotTo(ContainSubstring(tokB))
	})

	It("ends an open stream at its next keep-alive once its token is revoked", func() {
		path := filepath.Join(GinkgoT().TempDir(), "users.yaml")
		chain := usersChainAt(path, "alice", tokA, "bob", tokB)
		e := startEnv(httpsse.Config{Auth: chain, KeepAlive: 50 * time.Millisecond})
		ca, cb := e.initialize(asA...), e.initialize(asB...)
		sa, sb := e.stream(ca, asA...), e.stream(cb, asB...)
		writeUsers(path, "bob", tokB) // alice's token revoked
		Expect(chain.File.Reload()).To(BeTrue())
		sa.waitEOF()
		Consistently(sb.eof, 300*time.Millisecond).ShouldNot(BeClosed(), "bob's stream stays")
		resp, cancel := e.getStream(ca, asA...)
		cancel()
		Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
	})

	It("caps the connections of one user with 429 and Retry-After, not another user's", func() {
		e := startEnv(httpsse.Config{Auth: usersChain("alice", tokA, "bob", tokB), MaxConnectionsPerUser: 1})
		first := e.initialize(asA...)
		r := e.post(rpc(1, "initialize", map[string]any{"protocolVersion": 1}), asA...)
		Expect(r.status).To(Equal(http.StatusTooManyRequests))
		Expect(r.header.Get("Retry-After")).To(Equal("5"))
		Expect(r.json()["error"]).To(ContainSubstring("limit 1"))
		e.initialize(asB...)
		Expect(e.do(http.MethodDelete, "/acp", nil, append([]string{"Acp-Connection-Id", first}, asA...)...).status).
			To(Equal(http.StatusOK))
		e.initialize(asA...)
	})
})

var _ = Describe("identities over WebSocket", func() {
	const tokA, tokB = "token-of-alice", "token-of-bob"

	It("takes the principal from the acp.bearer subprotocol as from the header, caps it with 429 before the upgrade, and closes the socket with 1008 once its token is revoked", func() {
		path := filepath.Join(GinkgoT().TempDir(), "users.yaml")
		chain := usersChainAt(path, "alice", tokA, "bob", tokB)
		// The revoked token is seen at the next ping, within an interval.
		// The interval also sets the dead-peer window (2.5 intervals of
		// silence close a socket): at 50 ms a stall of 125 ms in this
		// process under load closed alice's or bob's live socket as dead.
		e := startEnv(httpsse.Config{Auth: chain, WSPingInterval: time.Second, MaxConnectionsPerUser: 1})
		_, resp, err := e.dialWS(nil, []string{"acp", "acp.bearer.nope"}, nil)
		Expect(err).To(HaveOccurred())
		Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))

		alice := e.ws(nil, "acp", "acp.bearer."+tokA)
		alice.initialize()
		sid := alice.newSession(2, e.cwd)
		_, resp, err = e.dialWS(http.Header{"Authorization": {"Bearer " + tokA}}, nil, nil)
		Expect(err).To(HaveOccurred())
		Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests), "alice's one connection is the socket")
		Expect(resp.Header.Get("Retry-After")).To(Equal("5"))

		bob := e.ws(http.Header{"Authorization": {"Bearer " + tokB}})
		bob.initialize()
		bob.send(rpc(3, "session/load", map[string]any{"sessionId": sid, "cwd": e.cwd, "mcpServers": []any{}}))
		r := bob.until(isResponse(3))
		Expect(r[len(r)-1]).To(HaveKey("error"), "alice's session is not bob's")

		writeUsers(path, "bob", tokB) // alice's token revoked
		Expect(chain.File.Reload()).To(BeTrue())
		Expect(alice.closeCode(5 * time.Second)).To(Equal(websocket.ClosePolicyViolation))
		Consistently(bob.closed, 300*time.Millisecond).ShouldNot(BeClosed(), "bob's socket stays")
		Eventually(func() string {
			return string(e.do(http.MethodGet, "/metrics", nil, "Authorization", "Bearer "+tokB).body)
		}, 5*time.Second).Should(ContainSubstring("iaccode_http_websockets 1"))
		Expect(e.logs.String()).NotTo(ContainSubstring(tokA))
	})
})
