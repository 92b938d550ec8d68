package cluster

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// tokenHeader carries the cluster token on every gRPC call between pods.
const tokenHeader = "x-iac-code-cluster"

// auth admits the gRPC calls of pods that hold the cluster secret. The
// token sent is an HMAC of a fixed label under the secret, never the secret
// itself; it is compared in constant time. It is a shared password: without
// TLS anyone who can read the pod network can replay it (see
// docs/deployment.md, "Security").
type auth struct {
	token   []byte
	log     zerolog.Logger
	refused func()

	mu       sync.Mutex
	lastWarn map[string]time.Time
}

func newAuth(secret string, log zerolog.Logger, refused func()) *auth {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("iac-code cluster v1"))
	return &auth{token: []byte(hex.EncodeToString(mac.Sum(nil))), log: log, refused: refused,
		lastWarn: map[string]time.Time{}}
}

func (a *auth) admitted(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get(tokenHeader)
	ok := len(got) == 1 && subtle.ConstantTimeCompare([]byte(got[0]), a.token) == 1
	if !ok {
		a.refuse(ctx, len(got) > 0)
	}
	return ok
}

// refuse counts and logs a refused call, at most once a minute per address
// (a refused pod retries all the time).
func (a *auth) refuse(ctx context.Context, hadToken bool) {
	a.refused()
	from := "unknown"
	if p, ok := grpcpeer.FromContext(ctx); ok && p.Addr != nil {
		from = p.Addr.String()
	}
	a.mu.Lock()
	last, seen := a.lastWarn[from]
	now := time.Now()
	if seen && now.Sub(last) < time.Minute {
		a.mu.Unlock()
		return
	}
	if len(a.lastWarn) > 1024 {
		clear(a.lastWarn)
	}
	a.lastWarn[from] = now
	a.mu.Unlock()
	a.log.Warn().Str("from", from).Bool("wrong_secret", hadToken).
		Msg("cluster: refused a connection that does not hold the cluster secret (IAC_CODE_CLUSTER_SECRET)")
}

var errRefused = status.Error(codes.Unauthenticated, "iac-code cluster: this pod does not hold the cluster secret")

func (a *auth) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if !a.admitted(ss.Context()) {
				return errRefused
			}
			return h(srv, ss)
		}),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if !a.admitted(ctx) {
				return nil, errRefused
			}
			return h(ctx, req)
		}),
	}
}

func (a *auth) dialOptions() []grpc.DialOption {
	tok := string(a.token)
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
			streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(metadata.AppendToOutgoingContext(ctx, tokenHeader, tok), desc, cc, method, opts...)
		}),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
			invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, tokenHeader, tok), method, req, reply, cc, opts...)
		}),
	}
}
