package mcpproxy_test

import (
	"strings"
	"testing"
)

// A typo of a listed tool is denied unlisted_tool as any unlisted tool is;
// the model's sentence names the tool it probably meant. D304 (did you mean,
// for tools).
func TestUnlistedToolHint(t *testing.T) {
	svc := startService(t)
	_, tok := svc.agent(`{"budget": 10, "tools": {"echo": {"cost": 0}}}`)
	h := svc.connect(t, tok, testUpstream(t, "Echoes its text.", ""), proxyOpts{})
	res := h.call(t, "ecoh", map[string]any{"text": "x"})
	if !res.IsError || !strings.Contains(text(res), "unlisted_tool") {
		t.Fatalf("ecoh: isError %v: %s", res.IsError, text(res))
	}
	if !strings.Contains(text(res), `did you mean "echo"?`) {
		t.Errorf("ecoh: the text has no hint: %s", text(res))
	}
	if res := h.call(t, "zzzzzz", nil); strings.Contains(text(res), "did you mean") {
		t.Errorf("zzzzzz: a hint where no tool is close: %s", text(res))
	}
}
