package server

import (
	"encoding/json"
	"maps"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/checkpoint"
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

// TestOpenAPIErrorCodes holds the error schema's code enum to the api's
// table of codes (api.Codes), the one home of the codes: a client generated
// from the document knows every code the server sends, and the server sends
// none the document does not name.
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
	codes := api.Codes()
	if len(codes) < 17 {
		t.Fatalf("api.Codes() = %v", codes)
	}
	slices.Sort(codes)
	enum := slices.Sorted(slices.Values(doc.Components.Schemas.Error.Properties.Code.Enum))
	if !slices.Equal(codes, enum) {
		t.Errorf("the Error schema's code enum %v\nis not the api's codes %v", enum, codes)
	}
}

// TestOpenAPIMatchesTypes holds each schema of the document to the Go type
// that the server writes or reads and the client reads or writes (package
// api, and lineage's and checkpoint's types on the wire): the JSON names of
// the type's fields are the schema's properties, both ways, so that a field
// added to one and not to the other fails here.
func TestOpenAPIMatchesTypes(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	body := func(path, method string) string {
		return "/paths/" + strings.ReplaceAll(strings.ReplaceAll(path, "~", "~0"), "/", "~1") + "/" + method + "/requestBody/content/application~1json/schema"
	}
	answer := func(path string) string {
		return "/paths/" + strings.ReplaceAll(path, "/", "~1") + "/get/responses/200/content/application~1json/schema"
	}
	for _, c := range []struct {
		pointer string
		typ     any
	}{
		{"/components/schemas/Error", api.Error{}},
		{"/components/schemas/Diagnostic", api.Diagnostic{}},
		{"/components/schemas/Created", api.Created{}},
		{"/components/schemas/AgentRow", api.Agent{}},
		{"/components/schemas/Principal", api.Principal{}},
		{"/components/schemas/VerifyResult", api.VerifyResult{}},
		{"/components/schemas/PendingRow", api.Pending{}},
		{"/components/schemas/Verdict", lineage.Verdict{}},
		{"/components/schemas/State", lineage.State{}},
		{"/components/schemas/Proof", checkpoint.Proof{}},
		{body("/v1/agents", "post"), api.CreateBody{}},
		{body("/v1/agents/{agent}/requests", "post"), api.RequestBody{}},
		{body("/v1/agents/{agent}/requests/{id}/approve", "post"), api.NoteBody{}},
		{body("/v1/agents/{agent}/requests/{id}/reject", "post"), api.NoteBody{}},
		{body("/v1/agents/{agent}/terminate", "post"), api.TerminateBody{}},
		{answer("/v1/agents/{agent}/policy"), api.PolicyAnswer{}},
	} {
		schema, ok := jsonPointer(doc, c.pointer).(map[string]any)
		if !ok {
			t.Errorf("%s: no schema", c.pointer)
			continue
		}
		props, _ := schema["properties"].(map[string]any)
		documented := slices.Sorted(maps.Keys(props))
		fields := jsonFields(reflect.TypeOf(c.typ))
		slices.Sort(fields)
		if !slices.Equal(documented, fields) {
			t.Errorf("%s has properties %v,\nits Go type %T the fields %v", c.pointer, documented, c.typ, fields)
		}
	}
}

// jsonPointer resolves an RFC 6901 pointer in a decoded JSON document.
func jsonPointer(doc any, pointer string) any {
	for _, tok := range strings.Split(pointer, "/")[1:] {
		m, ok := doc.(map[string]any)
		if !ok {
			return nil
		}
		doc = m[strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")]
	}
	return doc
}

// jsonFields lists the JSON member names of a struct type as encoding/json
// writes them: a tag's name or the field's, none for "-", the fields of an
// untagged embedded struct in place.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		switch {
		case tag == "-":
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			out = append(out, jsonFields(f.Type)...)
		case !f.IsExported():
		case name != "":
			out = append(out, name)
		default:
			out = append(out, f.Name)
		}
	}
	return out
}
