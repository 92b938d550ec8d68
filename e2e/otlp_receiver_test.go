package e2e

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP trace receiver built from the official OTLP
// protobuf packages: POST /v1/traces (http/protobuf) and the gRPC
// TraceService, on loopback. It keeps every span it is sent, flattened.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	URL      string // http://127.0.0.1:port, for OTEL_EXPORTER_OTLP_ENDPOINT
	GRPCURL  string // http://127.0.0.1:port of the gRPC server
	mu       sync.Mutex
	spans    []otlpSpan
	requests int
}

// otlpSpan is one received span with its resource's attributes.
type otlpSpan struct {
	Name, TraceID, SpanID, ParentID string
	Kind                            int32
	Attrs, Resource                 map[string]any
	StatusError                     bool
}

func startOTLPReceiver() *otlpReceiver {
	r := &otlpReceiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var msg collectortrace.ExportTraceServiceRequest
		if err != nil || req.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &msg) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		r.add(&msg)
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	hs := &http.Server{Handler: mux}
	go func() { _ = hs.Serve(ln) }()
	r.URL = "http://" + ln.Addr().String()

	gln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, r)
	go func() { _ = gs.Serve(gln) }()
	r.GRPCURL = "http://" + gln.Addr().String()
	DeferCleanup(func() {
		gs.Stop()
		_ = hs.Close()
	})
	return r
}

// Export implements the gRPC TraceService.
func (r *otlpReceiver) Export(_ context.Context, msg *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.add(msg)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) add(msg *collectortrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rs := range msg.ResourceSpans {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, otlpSpan{Name: s.Name, TraceID: hex.EncodeToString(s.TraceId),
					SpanID: hex.EncodeToString(s.SpanId), ParentID: hex.EncodeToString(s.ParentSpanId),
					Kind: int32(s.Kind), Attrs: attrMap(s.Attributes), Resource: res,
					StatusError: s.GetStatus().GetCode() == 2})
			}
		}
	}
}

// Spans are the spans received so far.
func (r *otlpReceiver) Spans() []otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]otlpSpan(nil), r.spans...)
}

// Requests counts the export requests received.
func (r *otlpReceiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

func attrMap(kvs []*commonpb.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		m[kv.Key] = anyValue(kv.Value)
	}
	return m
}

func anyValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_ArrayValue:
		out := []any{}
		for _, e := range x.ArrayValue.Values {
			out = append(out, anyValue(e))
		}
		return out
	}
	return nil
}
