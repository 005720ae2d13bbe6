// Package schema holds lineage's published JSON Schemas and nothing else.
//
// Each schema is a file "<name>.schema.json" in this directory, embedded into the
// binary: "policy" (docs/policy.md), "conformance" (docs/cases.md) and "auth" (the
// principals of the guard service, docs/service.md) and "serve" (the flags of
// lineagec serve --config, docs/operations.md). Package source compiles
// and applies them; editors use the files directly.
package schema

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// The $id of each published schema.
const (
	PolicyID      = "https://github.com/lineage-guard/lineage/schema/policy.schema.json"
	ConformanceID = "https://github.com/lineage-guard/lineage/schema/conformance.schema.json"
	AuthID        = "https://github.com/lineage-guard/lineage/schema/auth.schema.json"
	ServeID       = "https://github.com/lineage-guard/lineage/schema/serve.schema.json"
)

const suffix = ".schema.json"

//go:embed *.schema.json
var files embed.FS

// Get returns the schema named name ("policy", "conformance"): the bytes of the
// embedded file "<name>.schema.json".
func Get(name string) ([]byte, error) {
	if name == "" || strings.ContainsAny(name, `/\.`) {
		return nil, fmt.Errorf("schema: invalid schema name %q", name)
	}
	b, err := files.ReadFile(name + suffix)
	if err != nil {
		return nil, fmt.Errorf("schema: no schema named %q (have %s)", name, strings.Join(Names(), ", "))
	}
	return b, nil
}

// Names lists the embedded schemas by name, sorted.
func Names() []string {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, suffix) {
			names = append(names, strings.TrimSuffix(n, suffix))
		}
	}
	sort.Strings(names)
	return names
}
