// Package tracing exports OpenTelemetry traces of prompt turns, model calls
// and tool calls (GenAI semantic conventions) when the operator sets the
// standard OTEL_* variables, and is nothing otherwise: a nil *Tracer makes
// no span, reads no clock and allocates nothing.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The variables read here; the exporters read the other OTEL_EXPORTER_OTLP_*
// ones (headers, timeout, TLS, per-signal endpoint) themselves.
const (
	envExporter       = "OTEL_TRACES_EXPORTER"
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	// EnvCaptureContent opts in to prompt text, tool arguments and tool
	// results on spans (off: they may hold secrets and personal data).
	EnvCaptureContent = "IAC_CODE_OTEL_CAPTURE_CONTENT"
)

// Enabled reports whether the environment asks for traces: OTEL_TRACES_EXPORTER
// is otlp, or it is unset and an OTLP endpoint is set. An unsupported
// exporter or protocol is an error naming the variable.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv(envSDKDisabled)), "true") {
		return false, nil
	}
	exp := strings.ToLower(strings.TrimSpace(getenv(envExporter)))
	switch exp {
	case "none":
		return false, nil
	case "":
		if getenv(envEndpoint) == "" && getenv(envTracesEndpoint) == "" {
			return false, nil
		}
	case "otlp":
	default:
		return false, fmt.Errorf("%s=%q: only otlp and none are supported (stdout is the protocol in stdio mode)", envExporter, exp)
	}
	if _, err := protocol(getenv); err != nil {
		return false, err
	}
	return true, nil
}

// protocol is the OTLP protocol: http/protobuf (the default) or grpc.
func protocol(getenv func(string) string) (string, error) {
	name, p := envTracesProtocol, strings.TrimSpace(getenv(envTracesProtocol))
	if p == "" {
		name, p = envProtocol, strings.TrimSpace(getenv(envProtocol))
	}
	switch p {
	case "", "http/protobuf":
		return "http/protobuf", nil
	case "grpc":
		return "grpc", nil
	}
	return "", fmt.Errorf("%s=%q: use http/protobuf or grpc", name, p)
}

// Setup starts the OTLP exporter the environment asks for and makes it the
// process's tracer provider and W3C propagator. It returns nil and a no-op
// shutdown when tracing is off. service.name is OTEL_SERVICE_NAME, else
// OTEL_RESOURCE_ATTRIBUTES' one, else "iac-code".
func Setup(ctx context.Context, getenv func(string) string, version string) (*Tracer, func(context.Context) error, error) {
	noop := func(context.Context) error { return nil }
	on, err := Enabled(getenv)
	if err != nil || !on {
		return nil, noop, err
	}
	proto, _ := protocol(getenv)
	var exp sdktrace.SpanExporter
	if proto == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, noop, fmt.Errorf("OpenTelemetry exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(attribute.String("service.name", "iac-code"), attribute.String("service.version", version)),
		resource.Environment())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, noop, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	capture := strings.EqualFold(strings.TrimSpace(getenv(EnvCaptureContent)), "true")
	return New(tp, capture), tp.Shutdown, nil
}

// New is a Tracer of tp; capture puts prompt text, tool arguments and
// results on the spans.
func New(tp trace.TracerProvider, capture bool) *Tracer {
	return &Tracer{tr: tp.Tracer("github.com/iac-code/iac-code"), capture: capture}
}
