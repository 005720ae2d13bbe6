package source

import (
	"strings"
	"testing"
)

// TestLoneSurrogateRefused: encoding/json would decode "\ud800" to U+FFFD
// silently; a policy or case file holding one is refused where it is.
func TestLoneSurrogateRefused(t *testing.T) {
	for text, where := range map[string]string{
		`{"budget": 1, "tools": {}, "name": "\ud800"}`:     "p.json:1:37: /name",
		`{"budget": 1, "tools": {"\udc00x": {"cost": 1}}}`: "p.json:1:26: /tools",
	} {
		_, diags := Load("p.json", []byte(text))
		if len(diags) == 0 || !strings.Contains(diags.Error(), where) || !strings.Contains(diags.Error(), "lone surrogate") {
			t.Errorf("Load(%s) = %v; want a lone surrogate error at %s", text, diags, where)
		}
	}
	if _, diags := Load("p.json", []byte(`{"budget": 1, "tools": {}, "name": "\ud83d\ude00 \\ud800"}`)); len(diags) > 0 {
		t.Errorf("a surrogate pair and an escaped backslash: %v", diags)
	}
}
