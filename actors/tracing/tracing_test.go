package tracing_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/iac-code/iac-code/actors/tracing"
)

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		on   bool
		bad  bool
	}{
		{"nothing set", nil, false, false},
		{"service name alone", map[string]string{"OTEL_SERVICE_NAME": "x"}, false, false},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, false},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true, false},
		{"exporter otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, false},
		{"exporter none wins", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, false, false},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, false},
		{"grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true, false},
		{"console refused", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, false, true},
		{"http/json refused", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, true},
		{"traces protocol wins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, true, false},
	} {
		on, err := tracing.Enabled(env(c.env))
		if on != c.on || (err != nil) != c.bad {
			t.Errorf("%s: Enabled = %v, %v; want %v, error %v", c.name, on, err, c.on, c.bad)
		}
	}
}

func TestSetupOffIsNil(t *testing.T) {
	tr, stop, err := tracing.Setup(context.Background(), env(nil), "1")
	if tr != nil || err != nil {
		t.Fatalf("Setup with no variable = %v, %v; want nil, nil", tr, err)
	}
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Off, the turn, model call and tool call paths make no span and allocate
// nothing.
func TestNilTracerIsFree(t *testing.T) {
	var tr *tracing.Tracer
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, s := tr.StartTurn(ctx, tracing.Turn{SessionID: "s", Principal: "p", Model: "m"})
		c2, chat := tr.StartChat(c, "openai", "m", "s")
		chat.EndChat(1, 2, "end_turn", nil)
		_, tool := tr.StartTool(c2, "read_file", "c1", "s", nil)
		tool.EndTool(tr, "out", false)
		s.EndTurn("end_turn", 1, 2, "")
		if c != ctx {
			t.Fatal("context changed")
		}
	})
	if allocs != 0 {
		t.Fatalf("tracing off allocates %v per turn", allocs)
	}
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestSpansAndContent(t *testing.T) {
	for _, capture := range []bool{false, true} {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		tr := tracing.New(tp, capture)
		parent := tracing.WithParent(context.Background(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
		ctx, turn := tr.StartTurn(parent, tracing.Turn{SessionID: "sess", Principal: "alice", Model: "m1", Prompt: "secret prompt"})
		if got := tracing.Traceparent(ctx); got == "" || got[3:35] != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Fatalf("Traceparent of the turn = %q", got)
		}
		_, chat := tr.StartChat(ctx, "gemini", "m1", "sess")
		chat.EndChat(10, 2, "tool_use", nil)
		_, tool := tr.StartTool(ctx, "bash", "c1", "sess", []byte(`{"command":"secret args"}`))
		tool.EndTool(tr, "secret result", true)
		_, chat2 := tr.StartChat(ctx, "anthropic", "m2", "sess")
		chat2.EndChat(0, 0, "", errors.New("context deadline exceeded"))
		turn.EndTurn("end_turn", 10, 2, "")

		spans := rec.Ended()
		if len(spans) != 4 {
			t.Fatalf("%d spans", len(spans))
		}
		byName := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range spans {
			byName[s.Name()] = s
		}
		ia, ch, et := byName["invoke_agent"], byName["chat m1"], byName["execute_tool bash"]
		if ia == nil || ch == nil || et == nil {
			t.Fatalf("span names: %v", byName)
		}
		if ia.Parent().SpanID().String() != "00f067aa0ba902b7" || !ia.Parent().IsRemote() {
			t.Errorf("turn parent = %v", ia.Parent())
		}
		if ch.Parent().SpanID() != ia.SpanContext().SpanID() || et.Parent().SpanID() != ia.SpanContext().SpanID() {
			t.Error("chat and tool spans are not children of the turn")
		}
		if ch.SpanKind() != trace.SpanKindClient {
			t.Errorf("chat kind %v", ch.SpanKind())
		}
		a := attrs(ia)
		if a["enduser.id"].AsString() != "alice" || a["gen_ai.conversation.id"].AsString() != "sess" ||
			a["gen_ai.usage.input_tokens"].AsInt64() != 10 {
			t.Errorf("turn attributes %v", a)
		}
		if attrs(ch)["gen_ai.provider.name"].AsString() != "gcp.gemini" {
			t.Errorf("provider %v", attrs(ch)["gen_ai.provider.name"])
		}
		if c2 := byName["chat m2"]; c2 == nil || c2.Status().Code.String() != "Error" || attrs(c2)["error.type"].AsString() != "timeout" {
			t.Errorf("failed model call span %v", c2)
		}
		if et.Status().Code.String() != "Error" {
			t.Errorf("failed tool status %v", et.Status())
		}
		for _, s := range spans {
			for _, kv := range s.Attributes() {
				v := kv.Value.Emit()
				has := contains(v, "secret")
				if has && !capture {
					t.Errorf("content on %s without capture: %s=%s", s.Name(), kv.Key, v)
				}
			}
		}
		if capture {
			if !contains(a["gen_ai.input.messages"].AsString(), "secret prompt") ||
				!contains(attrs(et)["gen_ai.tool.call.arguments"].AsString(), "secret args") ||
				attrs(et)["gen_ai.tool.call.result"].AsString() != "secret result" {
				t.Errorf("content missing with capture on: %v %v", a, attrs(et))
			}
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
