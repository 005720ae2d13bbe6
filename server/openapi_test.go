package server

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
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
