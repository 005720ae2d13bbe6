package server

import (
	"context"
	"net/http"
	"os"

	"github.com/lineage-guard/lineage/api"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TracingFromEnv builds the tracer provider of serve from the standard
// OpenTelemetry environment (docs/operations.md, Traces): with
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, an
// OTLP/HTTP exporter (which reads the other OTEL_EXPORTER_OTLP_* variables
// itself) behind a batching provider; unset, nil and a shutdown that does
// nothing, so that nothing is traced and nothing costs. shutdown flushes the
// spans still buffered; serve calls it on exit.
func TracingFromEnv(ctx context.Context) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	none := func(context.Context) error { return nil }
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, none, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, none, err
	}
	// service.name is "lineage" unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES says otherwise (WithFromEnv comes last).
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "lineage")),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, none, err
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return p, p.Shutdown, nil
}

// traceContext is the propagator of the HTTP spans: a W3C traceparent
// (and tracestate) from the caller makes the request's span its child.
var traceContext = propagation.TraceContext{}

// startHTTPSpan opens the span of one request to a route, the child of the
// caller's span if the request carries a traceparent; nil tracer: none.
func (s *Server) startHTTPSpan(r *http.Request, rt route) (*http.Request, trace.Span) {
	if s.tracer == nil {
		return r, nil
	}
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := s.tracer.Start(ctx, rt.pattern(), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("http.request.method", r.Method),
			attribute.String("http.route", rt.path),
			attribute.String("url.path", r.URL.Path),
		))
	return r.WithContext(ctx), span
}

// endHTTPSpan closes a request's span with its status and principal.
func endHTTPSpan(span trace.Span, status int, p api.Principal) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int("http.response.wire.Status_code", status))
	if p.Name != "" {
		span.SetAttributes(attribute.String("lineage.principal", p.Name), attribute.String("lineage.role", string(p.Role)))
	}
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}
