package compiler_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage/compiler"
)

// BenchmarkCompileBigPolicy is compiling a JSON policy of 300 tools, each
// with a rule: reading (internal/source), the schema check and Rego.
func BenchmarkCompileBigPolicy(b *testing.B) {
	var s strings.Builder
	s.WriteString(`{"name": "big", "budget": 1000000, "rate_limit": {"max_actions": 60, "window_secs": 60}, "tools": {`)
	for i := range 300 {
		if i > 0 {
			s.WriteString(",")
		}
		fmt.Fprintf(&s, "\n  \"tool_%d\": {\"cost\": %d, \"max_calls\": %d, \"description\": \"tool number %d\", \"when\": [{\"expr\": \"args.amount > %d\", \"reason\": \"too_much\", \"scar\": \"minor\"}]}", i, i, i+1, i, i)
	}
	s.WriteString("\n}}\n")
	data := []byte(s.String())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := compiler.Compile("big.json", data); err != nil {
			b.Fatal(strings.SplitN(err.Error(), "\n", 2)[0])
		}
	}
}
