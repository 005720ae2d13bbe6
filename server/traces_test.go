package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/server"
	"github.com/lineage-guard/lineage/server/servertest"
)

// otlpReceiver is a real OTLP/HTTP trace receiver on a loopback port: it
// decodes each POST /v1/traces body as an ExportTraceServiceRequest.
type otlpReceiver struct {
	URL   string
	mu    sync.Mutex
	spans []*tracepb.Span
	errs  []string
}

func startReceiver(t testing.TB) *otlpReceiver {
	t.Helper()
	rcv := &otlpReceiver{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			rcv.fail("unexpected %s %s", r.Method, r.URL.Path)
			http.NotFound(w, r)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				rcv.fail("gzip: %v", err)
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			rcv.fail("reading: %v", err)
			return
		}
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			rcv.fail("decoding (Content-Type %s): %v", r.Header.Get("Content-Type"), err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rcv.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				rcv.spans = append(rcv.spans, ss.Spans...)
			}
		}
		rcv.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(hs.Close)
	rcv.URL = hs.URL
	return rcv
}

func (r *otlpReceiver) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// startTraced is start with tracing configured the way serve configures it:
// from the environment, OTEL_EXPORTER_OTLP_ENDPOINT set to endpoint (""
// unsets it). It returns the provider's shutdown (flush).
func startTraced(t testing.TB, endpoint string) (*env, func(context.Context) error) {
	t.Helper()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tp, shutdown, err := server.TracingFromEnv(bg)
	if err != nil {
		t.Fatal(err)
	}
	if (tp != nil) != (endpoint != "") {
		t.Fatalf("endpoint %q: provider %v", endpoint, tp)
	}
	svc := servertest.Start(t,
		servertest.WithRuntime(func(o *runtime.Options) { o.TracerProvider = tp }),
		servertest.WithConfig(func(c *server.Config) { c.TracerProvider = tp }))
	t.Cleanup(func() { shutdown(context.Background()) })
	e := &env{t: t, url: svc.URL, dir: svc.Dir, srv: svc.Server, store: svc.File, hs: svc.HTTP, svc: svc, logs: &syncBuffer{},
		tokens: map[string]string{"admin": svc.AdminToken, "approver": svc.ApproverToken}}
	e.admin = e.client(svc.AdminToken)
	e.approver = e.client(svc.ApproverToken)
	return e, shutdown
}

func attrs(s *tracepb.Span) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes {
		switch kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = kv.Value.GetStringValue()
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = kv.Value.GetIntValue()
		default:
			m[kv.Key] = kv.Value.String()
		}
	}
	return m
}

// TestTracesOverOTLP: with OTEL_EXPORTER_OTLP_ENDPOINT set, a request
// carrying a W3C traceparent gives an HTTP span that is the caller's span's
// child, and inside it the decision span (agent, tool, decision, reason,
// seq), whose children are the OPA evaluation and the store commit; all
// arrive at a real OTLP/HTTP receiver once the provider is shut down.
func TestTracesOverOTLP(t *testing.T) {
	rcv := startReceiver(t)
	e, shutdown := startTraced(t, rcv.URL)
	agent, _ := e.agent()

	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, err := http.NewRequest("POST", e.url+"/v1/agents/"+agent+"/requests", strings.NewReader(`{"tool":"pay","args":{"amount":7}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.agentToken(agent))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
		Seq      int64  `json:"seq"`
	}
	err = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("flushing: %v", err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.errs) > 0 {
		t.Fatalf("receiver: %v", rcv.errs)
	}
	byName := map[string]*tracepb.Span{}
	for _, s := range rcv.spans {
		if hex.EncodeToString(s.TraceId) == traceID {
			if byName[s.Name] != nil {
				t.Errorf("two spans %q in the trace", s.Name)
			}
			byName[s.Name] = s
		}
	}
	httpSpan := byName["POST /v1/agents/{agent}/requests"]
	dec := byName[runtime.SpanDecision]
	eval := byName[runtime.SpanEval]
	commit := byName[runtime.SpanCommit]
	if httpSpan == nil || dec == nil || eval == nil || commit == nil {
		names := []string{}
		for _, s := range rcv.spans {
			names = append(names, s.Name+"@"+hex.EncodeToString(s.TraceId))
		}
		t.Fatalf("missing spans in trace %s; got %v", traceID, names)
	}
	if got := hex.EncodeToString(httpSpan.ParentSpanId); got != callerSpan {
		t.Errorf("HTTP span's parent = %q, want the caller's %q", got, callerSpan)
	}
	if httpSpan.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("HTTP span kind = %v", httpSpan.Kind)
	}
	if a := attrs(httpSpan); a["http.response.wire.Status_code"] != int64(200) || a["http.route"] != "/v1/agents/{agent}/requests" || a["http.request.method"] != "POST" {
		t.Errorf("HTTP span attributes %v", a)
	}
	if !bytes.Equal(dec.ParentSpanId, httpSpan.SpanId) {
		t.Errorf("decision span's parent = %x, want the HTTP span %x", dec.ParentSpanId, httpSpan.SpanId)
	}
	want := map[string]any{"lineage.agent": agent, "lineage.tool": "pay", "lineage.decision": v.Decision,
		"lineage.reason": v.Reason, "lineage.seq": v.Seq}
	got := attrs(dec)
	for k, w := range want {
		if got[k] != w {
			t.Errorf("decision span %s = %v, want %v (all: %v)", k, got[k], w, got)
		}
	}
	if v.Decision != "allow" || v.Seq == 0 {
		t.Errorf("verdict %+v", v)
	}
	for _, s := range []*tracepb.Span{eval, commit} {
		if !bytes.Equal(s.ParentSpanId, dec.SpanId) {
			t.Errorf("%s's parent = %x, want the decision span %x", s.Name, s.ParentSpanId, dec.SpanId)
		}
	}
}

// TestTracesOffWithoutEndpoint: with no OTLP endpoint in the environment
// there is no provider, and serving works without one.
func TestTracesOffWithoutEndpoint(t *testing.T) {
	e, _ := startTraced(t, "")
	agent, bot := e.agent()
	if _, err := bot.Request(bg, agent, lineage.Request{Tool: "pay", Args: map[string]any{"amount": json.Number("7")}}); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkDecisionTraces is one durable decision over HTTP through the
// real client, with tracing off (no endpoint: no provider) and on (an OTLP
// endpoint at a loopback receiver, every span sampled and exported).
func BenchmarkDecisionTraces(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		b.Run(mode, func(b *testing.B) {
			endpoint := ""
			if mode == "on" {
				endpoint = startReceiver(b).URL
			}
			e, _ := startTraced(b, endpoint)
			created, err := e.admin.CreateAgent(bg, json.RawMessage(`{"budget": 1000000000, "tools": {"pay": {"cost": 1}}}`), "", "")
			if err != nil {
				b.Fatal(err)
			}
			agent, bot := created.Agent, e.client(created.Token)
			req := lineage.Request{Tool: "pay", Args: map[string]any{"amount": json.Number("1")}}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := bot.Request(bg, agent, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestTracesFollowCallerSampling: a caller's traceparent that is not
// sampled (flags 00) gives no spans from serve in that trace, and a
// malformed traceparent is ignored (a new root), never refused (D382, the
// caller's traceparent is honoured).
func TestTracesFollowCallerSampling(t *testing.T) {
	rcv := startReceiver(t)
	e, shutdown := startTraced(t, rcv.URL)
	agent, _ := e.agent()
	const unsampled = "5bf92f3577b34da6a3ce929d0e0e4736"
	for _, tp := range []string{"00-" + unsampled + "-00f067aa0ba902b7-00", "00-zz-not-a-traceparent"} {
		req, err := http.NewRequest("POST", e.url+"/v1/agents/"+agent+"/requests", strings.NewReader(`{"tool":"pay","args":{"amount":7}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e.agentToken(agent))
		req.Header.Set("traceparent", tp)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("traceparent %q: status %d", tp, resp.StatusCode)
		}
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	roots := 0
	for _, s := range rcv.spans {
		if hex.EncodeToString(s.TraceId) == unsampled {
			t.Errorf("span %q exported in a trace the caller did not sample", s.Name)
		}
		if s.Name == "POST /v1/agents/{agent}/requests" {
			if len(s.ParentSpanId) != 0 {
				t.Errorf("malformed traceparent: HTTP span has parent %x", s.ParentSpanId)
			}
			roots++
		}
	}
	if roots != 1 {
		t.Errorf("%d request spans, want 1 (the malformed traceparent's, a new root)", roots)
	}
}

// TestTracesApproval: approving a pending request gives a decision span
// with the pending request's tool and the approval's verdict.
func TestTracesApproval(t *testing.T) {
	rcv := startReceiver(t)
	e, shutdown := startTraced(t, rcv.URL)
	agent, bot := e.agent()
	p, err := bot.Request(bg, agent, lineage.Request{Tool: "wire"})
	if err != nil || p.Decision != lineage.Pending {
		t.Fatalf("%+v, %v", p, err)
	}
	v, err := e.approver.Approve(bg, agent, p.RequestID)
	if err != nil {
		t.Fatal(err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	found := false
	for _, s := range rcv.spans {
		if a := attrs(s); s.Name == runtime.SpanDecision && a["lineage.seq"] == int64(v.Seq) {
			found = true
			if a["lineage.tool"] != "wire" || a["lineage.decision"] != string(v.Decision) || a["lineage.agent"] != agent {
				t.Errorf("approval's decision span: %v, verdict %+v", a, v)
			}
		}
	}
	if !found {
		t.Errorf("no decision span with seq %d", v.Seq)
	}
}
