package server

import (
	"encoding/json"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
)

// TestOpenAPIMatchesRoutes holds the embedded document to the mux: every
// route registered is documented, every documented path and method is served,
// and each documents the error statuses its access implies.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	s := &Server{}
	served := map[string]access{}
	for _, rt := range s.routes() {
		served[strings.ToLower(rt.method)+" "+rt.path] = rt.who
	}
	documented := map[string]bool{}
	for p, ops := range doc.Paths {
		for m, raw := range ops {
			key := m + " " + p
			documented[key] = true
			who, ok := served[key]
			if !ok {
				t.Errorf("documented but not served: %s", key)
				continue
			}
			var op struct {
				Responses map[string]json.RawMessage `json:"responses"`
				Security  []map[string][]string      `json:"security"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			if (who == public) != (len(op.Security) == 0) {
				t.Errorf("%s: security %v does not match its access", key, op.Security)
			}
			if who != public && op.Responses["401"] == nil {
				t.Errorf("%s: 401 not documented", key)
			}
			if who != public && who != anyone && op.Responses["403"] == nil {
				t.Errorf("%s: 403 not documented", key)
			}
		}
	}
	var missing []string
	for key := range served {
		if !documented[key] {
			missing = append(missing, key)
		}
	}
	sort.Strings(missing)
	for _, key := range missing {
		t.Errorf("served but not documented: %s", key)
	}
}

// TestOpenAPIRoutedByTheMux sends each documented method and path (wildcards
// filled in) through the server's own mux: it must reach that very pattern.
func TestOpenAPIRoutedByTheMux(t *testing.T) {
	s, err := New(Config{Runtime: runtime.Open(store.NewMemory(), runtime.Options{}), Key: NewKey()})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	fill := strings.NewReplacer("{agent}", "agt_x", "{id}", "r%2F1")
	n := 0
	for p, ops := range doc.Paths {
		for m := range ops {
			method := strings.ToUpper(m)
			r := httptest.NewRequest(method, fill.Replace(p), nil)
			if _, pattern := s.mux.Handler(r); pattern != method+" "+p {
				t.Errorf("%s %s reaches %q", method, p, pattern)
			}
			n++
		}
	}
	if n != len(s.routes()) {
		t.Errorf("%d documented operations, %d routes", n, len(s.routes()))
	}
}
