package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/iac-code/iac-code/store/pgtest"
)

// benchCluster is N iac-code pods in cluster mode on a throwaway
// PostgreSQL, behind a round-robin reverse proxy (every request to the
// next pod, as a plain load balancer does): what http-fanout --pods
// measures, the cross-pod hop included.
type benchCluster struct {
	pg    *pgtest.Server
	pods  []*Server
	proxy *http.Server
	addr  string
}

func startCluster(ctx context.Context, o *Options, fakeURL string, n int) (*benchCluster, error) {
	pg, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL for the cluster: %w", err)
	}
	c := &benchCluster{pg: pg}
	_, dbURL, err := pg.NewDatabase()
	if err != nil {
		c.stop()
		return nil, err
	}
	for i := range n {
		port, err := FreePort()
		if err != nil {
			c.stop()
			return nil, err
		}
		s, err := startServer(ctx, o, "http", fakeURL, []string{"IAC_CODE_STORE_URL=" + dbURL,
			"IAC_CODE_CLUSTER_SECRET=acp-bench", "IAC_CODE_CLUSTER_LISTEN=127.0.0.1:" + strconv.Itoa(port),
			"IAC_CODE_API_KEY=" + podAPIKey(i)})
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("pod %d: %w", i, err)
		}
		c.pods = append(c.pods, s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.stop()
		return nil, err
	}
	var backends []*url.URL
	for _, s := range c.pods {
		backends = append(backends, &url.URL{Scheme: "http", Host: s.Addr})
	}
	var next atomic.Uint64
	base := &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			b := backends[(next.Add(1)-1)%uint64(len(backends))]
			r.SetURL(b)
			r.Out.Host = "127.0.0.1"
		},
		FlushInterval: -1,
		Transport:     base,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			code := http.StatusBadGateway
			if errors.Is(err, syscall.ECONNREFUSED) {
				code = http.StatusServiceUnavailable
			}
			http.Error(w, err.Error(), code)
		},
	}
	c.proxy = &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = c.proxy.Serve(ln) }()
	c.addr = ln.Addr().String()
	return c, nil
}

// podAPIKey is pod i's API key: the fake model tells the pods' requests
// apart by it (survive).
func podAPIKey(i int) string { return "acp-bench-pod-" + strconv.Itoa(i) }

func (c *benchCluster) stop() {
	if c.proxy != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.proxy.Shutdown(ctx)
		cancel()
		_ = c.proxy.Close()
	}
	for _, s := range c.pods {
		s.Stop()
	}
	if c.pg != nil {
		_ = c.pg.Stop()
	}
}
