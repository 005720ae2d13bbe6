package runtime

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lineage-guard/lineage"
)

// Span names of the runtime (docs/operations.md, Traces).
const (
	SpanDecision = "lineage.decision"
	SpanEval     = "lineage.opa.eval"
	SpanCommit   = "lineage.store.commit"
)

// tracerName is the instrumentation scope of the runtime's spans.
const tracerName = "github.com/lineage-guard/lineage/runtime"

// tracerOf is nil without a provider: then start opens no span at all, not
// even a no-op one in a new context (no allocation on the decision path).
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

// noSpan is the span of a runtime without a tracer: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// start opens a span named name under ctx's span, or none without a tracer.
func (r *Runtime) start(ctx context.Context, name string) (context.Context, trace.Span) {
	if r.tracer == nil {
		return ctx, noSpan
	}
	return r.tracer.Start(ctx, name)
}

// startDecision opens the decision span of one request or approval of an
// agent; endDecision closes it with the verdict or the error.
func (r *Runtime) startDecision(ctx context.Context, agentID, tool string) (context.Context, trace.Span) {
	ctx, span := r.start(ctx, SpanDecision)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("lineage.agent", agentID))
		if tool != "" {
			span.SetAttributes(attribute.String("lineage.tool", tool))
		}
	}
	return ctx, span
}

// setTool names the tool on ctx's decision span, once the runtime knows it
// (an approval names only the request).
func setTool(ctx context.Context, tool string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("lineage.tool", tool))
	}
}

func endDecision(span trace.Span, v lineage.Verdict, err error) {
	if span.IsRecording() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(
				attribute.String("lineage.decision", string(v.Decision)),
				attribute.String("lineage.reason", v.Reason),
				attribute.Int64("lineage.seq", int64(v.Seq)),
			)
		}
	}
	span.End()
}

// endSpan closes a span, marking it failed by err if not nil.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
