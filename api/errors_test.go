package api

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/lineage-guard/lineage"
)

// TestSentinelTextIsCode: a sentinel's text is the code it is answered with
// (package lineage writes each once as its text), so the error a caller
// prints locally names the code a server would send. too_large matches
// ErrBadRequest without being its text.
func TestSentinelTextIsCode(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range codes {
		if seen[c.name] {
			t.Errorf("code %s twice in the table", c.name)
		}
		seen[c.name] = true
		if c.sentinel != nil && c.name != CodeTooLarge && c.sentinel.Error() != c.name {
			t.Errorf("code %s matches the sentinel %q", c.name, c.sentinel)
		}
		for _, s := range c.from {
			if got, ok := CodeOf(fmt.Errorf("wrapped: %w", s)); !ok || got != c.name {
				t.Errorf("CodeOf(%v) = %q, %v; want %s", s, got, ok, c.name)
			}
		}
		if Status(c.name) < 400 {
			t.Errorf("code %s has status %d", c.name, Status(c.name))
		}
	}
	if _, ok := CodeOf(errors.New("something else")); ok {
		t.Error("CodeOf knows an error that is no sentinel")
	}
	if Status("no_such_code") != http.StatusServiceUnavailable {
		t.Error("an unknown code is not the service's own failure (503)")
	}
}

// TestErrorIs: an error answer matches the sentinel of its code, and only it.
func TestErrorIs(t *testing.T) {
	e := &Error{Status: 409, Code: CodeIDConflict, Message: "request id \"w1\" was used before"}
	if !errors.Is(e, lineage.ErrIDConflict) || errors.Is(e, lineage.ErrSealed) {
		t.Errorf("%v matches the wrong sentinels", e)
	}
	big := &Error{Status: 413, Code: CodeTooLarge}
	if !errors.Is(big, lineage.ErrBadRequest) || big.Error() != "too_large (HTTP 413)" {
		t.Errorf("too_large: %v", big)
	}
	if errors.Is(&Error{Code: CodeClockUnsynced}, lineage.ErrServiceUnavailable) {
		t.Error("clock_unsynced matches unavailable's sentinel")
	}
}
