// Package rego holds lineage's base Rego library: what every policy's verdict
// shares (denials with their scars and the terminations they cause, the
// rejection, the extension helpers). The compiler writes each policy's
// decision order (docs/decision-order.md) as Rego over it. The library is data (embedded
// .rego files) plus its own *_test.rego tests, and the list of the builtins
// lineage's Rego may use (builtins.go); it holds no other Go logic.
package rego

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed *.rego
var files embed.FS

// Module is one Rego module: a file of this library, or one of a compiled
// policy's (policy.Compiled.Modules: the library, the generated policy, its
// extensions).
type Module struct {
	Name   string // file name, e.g. "lineage/guard.rego" or "policy.rego"
	Source string
}

// Library returns the library modules (tests excluded), sorted by name.
func Library() []Module {
	return list(func(name string) bool { return !strings.HasSuffix(name, "_test.rego") })
}

// Tests returns the library's own Rego tests.
func Tests() []Module {
	return list(func(name string) bool { return strings.HasSuffix(name, "_test.rego") })
}

func list(keep func(string) bool) []Module {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		panic(err) // embedded: cannot fail
	}
	var out []Module
	for _, e := range entries {
		if !keep(e.Name()) {
			continue
		}
		b, err := files.ReadFile(e.Name())
		if err != nil {
			panic(err)
		}
		out = append(out, Module{Name: "lineage/" + e.Name(), Source: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Query is the Rego query whose single result is the verdict of a request or
// an approval; the compiler writes that rule into each policy's module.
const Query = "data.lineage.policy.verdict"

// RejectQuery is the Rego query whose single result is the verdict of a rejection.
const RejectQuery = "data.lineage.guard.rejection"
