package runtime

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lineage-guard/lineage"
)

// MaxActorBytes bounds an approver's or a kill switch's name.
const MaxActorBytes = 256

// checkActor refuses a name that cannot stand for a person or service apart
// from the agent (docs/approvals.md, D52 (approver names)): empty, not UTF-8, over MaxActorBytes, with
// space at either end, with a control or invisible character anywhere, or the
// agent's own id or name in any letter case. what names the field in the
// message.
func checkActor(what, name string, a *agent) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s %q: %s; it must name a person or service other than the agent",
			lineage.ErrBadApprover, what, name, fmt.Sprintf(format, args...))
	}
	switch {
	case name == "":
		return bad("empty")
	case !utf8.ValidString(name):
		return bad("not valid UTF-8")
	case len(name) > MaxActorBytes:
		return bad("%d bytes, over the limit of %d", len(name), MaxActorBytes)
	}
	first, _ := utf8.DecodeRuneInString(name)
	last, _ := utf8.DecodeLastRuneInString(name)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		return bad("space at its start or end")
	}
	for i, r := range name {
		if invisible(r) {
			return bad("control or invisible character %U at byte %d", r, i)
		}
	}
	if strings.EqualFold(name, a.id) || (a.f.name != "" && strings.EqualFold(name, a.f.name)) {
		return bad("that is the agent itself")
	}
	return nil
}

// invisible: Unicode controls (Cc), format characters (Cf), line and
// paragraph separators (Zl, Zp) and the other default-ignorable code points
// (variation selectors, Hangul fillers, U+034F, …), which render as nothing
// and would let two different names look the same.
func invisible(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp,
		unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector)
}
