package server

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// TestOpenAPIMatchesRoutes holds the embedded document to the mux: every
// route registered is documented, every documented path and method is served,
// and each documents the error statuses its access implies, each 4xx and
// 5xx with the error schema. Every operation has an operationId, the name a
// generated client gives its method (D290 (operation ids are method names)),
// and no two share one.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string `json:"openapi"`
		Info    struct {
			License struct {
				Name, Identifier string
			} `json:"license"`
		} `json:"info"`
		Servers []struct {
			URL, Description string
		} `json:"servers"`
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	operationIDs := map[string]string{} // id → method and path
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	// D291 (servers is the default address, as an example)
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "http://127.0.0.1:8181" || !strings.Contains(doc.Servers[0].Description, "example") {
		t.Errorf("servers = %+v, want the default address described as an example", doc.Servers)
	}
	if doc.Info.License.Identifier != "Apache-2.0" {
		t.Errorf("info.license = %+v, want Apache-2.0", doc.Info.License)
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
				OperationID string `json:"operationId"`
				Responses   map[string]struct {
					Content map[string]struct {
						Schema struct {
							Ref string `json:"$ref"`
						} `json:"schema"`
					} `json:"content"`
				} `json:"responses"`
				Security []map[string][]string `json:"security"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			switch prev, dup := operationIDs[op.OperationID]; {
			case !operationIDPattern.MatchString(op.OperationID):
				t.Errorf("%s: operationId %q is not a method name (lowerCamelCase)", key, op.OperationID)
			case dup:
				t.Errorf("%s: operationId %q is %s's too", key, op.OperationID, prev)
			}
			operationIDs[op.OperationID] = key
			for status, res := range op.Responses {
				if status[0] != '4' && status[0] != '5' {
					continue
				}
				if ref := res.Content["application/json"].Schema.Ref; ref != "#/components/schemas/Error" || len(res.Content) != 1 {
					t.Errorf("%s: %s is not the error schema alone (application/json %q)", key, status, ref)
				}
			}
			if (who == public) != (len(op.Security) == 0) {
				t.Errorf("%s: security %v does not match its access", key, op.Security)
			}
			if _, ok := op.Responses["401"]; who != public && !ok {
				t.Errorf("%s: 401 not documented", key)
			}
			if _, ok := op.Responses["403"]; who != public && who != anyone && !ok {
				t.Errorf("%s: 403 not documented", key)
			}
			if _, ok := op.Responses["404"]; strings.Contains(key, "{agent}") && !ok {
				t.Errorf("%s: 404 (unknown_agent) not documented", key)
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
	s, err := New(Config{Runtime: runtime.Open(memory.New(), runtime.Options{}), Key: NewKey()})
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

// operationIDPattern is the form of an operationId: a method name.
var operationIDPattern = regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)

// TestOpenAPIErrorCodes holds the error schema's code enum to the package's
// Code constants, the one table of codes (errors.go, checkpoint.go): a
// client generated from the document knows every code the server sends.
func TestOpenAPIErrorCodes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Code struct {
							Enum []string `json:"enum"`
						} `json:"code"`
					} `json:"properties"`
				} `json:"Error"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	enum := doc.Components.Schemas.Error.Properties.Code.Enum
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					code, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					codes = append(codes, code)
				}
			}
			return true
		})
	}
	if len(codes) < 14 {
		t.Fatalf("found %d Code constants: %v", len(codes), codes)
	}
	slices.Sort(codes)
	sorted := slices.Sorted(slices.Values(enum))
	if !slices.Equal(codes, sorted) {
		t.Errorf("the Error schema's code enum %v\nis not the Code constants %v", sorted, codes)
	}
}
