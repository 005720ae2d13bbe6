package source

import (
	"fmt"
	"strings"
	"testing"
)

// bigPolicy is a policy of n tools, each with a rule, in JSON or YAML.
func bigPolicy(n int, yaml bool) []byte {
	var b strings.Builder
	if yaml {
		b.WriteString("name: big\nbudget: 1000000\nrate_limit: {max_actions: 60, window_secs: 60}\ntools:\n")
		for i := range n {
			fmt.Fprintf(&b, "  tool_%d:\n    cost: %d.5\n    max_calls: %d\n    description: \"tool number %d\"\n    when:\n      - {expr: \"args.amount > %d\", reason: \"too much\", scar: minor}\n", i, i, i+1, i, i)
		}
		return []byte(b.String())
	}
	b.WriteString(`{"name": "big", "budget": 1000000, "rate_limit": {"max_actions": 60, "window_secs": 60}, "tools": {`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n  \"tool_%d\": {\"cost\": %d.5, \"max_calls\": %d, \"description\": \"tool number %d\", \"when\": [{\"expr\": \"args.amount > %d\", \"reason\": \"too much\", \"scar\": \"minor\"}]}", i, i, i+1, i, i)
	}
	b.WriteString("\n}}\n")
	return []byte(b.String())
}

// BenchmarkLoadBigPolicy is reading a policy of 2000 tools (positions kept).
func BenchmarkLoadBigPolicy(b *testing.B) {
	for _, yaml := range []bool{false, true} {
		name, file := "json", "big.json"
		if yaml {
			name, file = "yaml", "big.yaml"
		}
		data := bigPolicy(2000, yaml)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, diags := Load(file, data); len(diags) > 0 {
					b.Fatal(diags)
				}
			}
		})
	}
}
