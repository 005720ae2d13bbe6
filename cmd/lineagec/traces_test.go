package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime"
)

// TestServeTraces runs a real `lineagec serve` with OTEL_EXPORTER_OTLP_ENDPOINT
// at a real OTLP/HTTP receiver: a request with a traceparent gives its HTTP
// span (the caller's child) and the decision span (the HTTP span's child),
// and they arrive by the flush on SIGTERM at the latest (docs/operations.md,
// Traces; D383: spans never hold a decision, flushed on exit).
func TestServeTraces(t *testing.T) {
	var (
		mu    sync.Mutex
		spans []*tracepb.Span
		bad   []string
	)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			bad = append(bad, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	defer rcv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")

	data := t.TempDir()
	cmd, url, stderr, wait := startServe(t, data)
	tok, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := client.New(url, strings.TrimSpace(string(tok)), nil)
	created, err := admin.CreateAgent(context.Background(), json.RawMessage(`{"budget": 100, "tools": {"t": {"cost": 1}}}`), "", "")
	if err != nil {
		t.Fatal(err)
	}
	const traceID, caller = "6bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7"
	req, _ := http.NewRequest("POST", url+"/v1/agents/"+created.Agent+"/requests", strings.NewReader(`{"tool":"t"}`))
	req.Header.Set("Authorization", "Bearer "+created.Token)
	req.Header.Set("traceparent", "00-"+traceID+"-"+caller+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("receiver got %v", bad)
	}
	byName := map[string]*tracepb.Span{}
	for _, s := range spans {
		if hex.EncodeToString(s.TraceId) == traceID {
			byName[s.Name] = s
		}
	}
	h, d := byName["POST /v1/agents/{agent}/requests"], byName[runtime.SpanDecision]
	if h == nil || d == nil || byName[runtime.SpanEval] == nil || byName[runtime.SpanCommit] == nil {
		t.Fatalf("spans of trace %s: %v (all %d)\n%s", traceID, byName, len(spans), stderr())
	}
	if hex.EncodeToString(h.ParentSpanId) != caller || !bytes.Equal(d.ParentSpanId, h.SpanId) {
		t.Errorf("parents: HTTP %x (want %s), decision %x (want %x)", h.ParentSpanId, caller, d.ParentSpanId, h.SpanId)
	}
	if strings.Contains(stderr(), "flushing the traces") {
		t.Errorf("stderr:\n%s", stderr())
	}
}
