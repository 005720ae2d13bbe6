package model

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lineage-guard/lineage"
)

// SetName gives the agent the name its genesis record carries: no approver
// may take it (D52: approver names).
func (m *Model) SetName(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.name = name
}

// goodName is docs/approvals.md's approver (and kill switch) name, D52 (approver names): not empty,
// valid UTF-8 of at most 256 bytes, no white space at either end, no
// character of categories Cc, Cf, Zl, Zp and no other default-ignorable code
// point, and neither the agent's id nor its name in any letter case.
func (m *Model) goodName(s string) bool {
	if s == "" || len(s) > 256 || !utf8.ValidString(s) {
		return false
	}
	runes := []rune(s)
	if unicode.IsSpace(runes[0]) || unicode.IsSpace(runes[len(runes)-1]) {
		return false
	}
	for _, r := range runes {
		if unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r) ||
			unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || unicode.Is(unicode.Variation_Selector, r) {
			return false
		}
	}
	return !strings.EqualFold(s, m.agent) && (m.name == "" || !strings.EqualFold(s, m.name))
}

// holdable is D50 (the times the guard holds): the runtime keeps times as int64 nanoseconds since 1970,
// never negative; any other time is a malformed request.
func holdable(t time.Time) error {
	if t.Before(time.Unix(0, 0)) || t.After(time.Unix(0, math.MaxInt64)) {
		return fmt.Errorf("model: time %s is outside 1970-01-01…2262-04-11T23:47:16.854775807Z: %w",
			t.UTC().Format(time.RFC3339Nano), lineage.ErrBadRequest)
	}
	return nil
}
