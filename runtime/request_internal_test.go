package runtime

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestNameChecksMatchTheirPatterns holds the hand-written checks of tool names
// and reserved ids equal to the regular expressions they replace, over random
// strings drawn from the characters that matter and their neighbours.
func TestNameChecksMatchTheirPatterns(t *testing.T) {
	tool := regexp.MustCompile(toolNamePattern)
	reserved := regexp.MustCompile(`^req_[0-9]+$`)
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "Z", "0", "9", "_", ".", ":", "/", "-", " ", "é", "\x00", "\xff", "@", "`", "{", "[", "req_", "r", "q"}
	for _, s := range []string{strings.Repeat("a", 128), strings.Repeat("a", 129), "a" + strings.Repeat("-", 127), "a" + strings.Repeat("-", 128), "", "req_", "req_0", "req_01x"} {
		if validToolName(s) != tool.MatchString(s) || reservedID(s) != reserved.MatchString(s) {
			t.Fatalf("%q: the checks disagree with the patterns", s)
		}
	}
	for i := 0; i < 200_000; i++ {
		var b strings.Builder
		for n := r.IntN(12); n > 0; n-- {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		s := b.String()
		if got, want := validToolName(s), tool.MatchString(s); got != want {
			t.Fatalf("validToolName(%q) = %v, the pattern says %v", s, got, want)
		}
		if got, want := reservedID(s), reserved.MatchString(s); got != want {
			t.Fatalf("reservedID(%q) = %v, the pattern says %v", s, got, want)
		}
	}
}
