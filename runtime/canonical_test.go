package runtime

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/lineage-guard/lineage"
)

// TestCanonicalBodies holds the bodies the runtime writes without the JCS
// library to the library's own output, over random contents that include every
// kind of character JSON escapes differently somewhere.
func TestCanonicalBodies(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	alphabet := []string{"a", "Z", "0", " ", "\"", "\\", "/", "<", ">", "&", "\b", "\f", "\n", "\r", "\t",
		"\x00", "\x1f", "\x7f", "é", "€", "\u2028", "\u2029", "\ufeff", "𝄞", "\uffff", "\\u2028"}
	str := func() string {
		var b strings.Builder
		for n := r.IntN(8); n > 0; n-- {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	fast := 0
	for i := 0; i < 5000; i++ {
		v := lineage.Verdict{Decision: lineage.Deny, Reason: str(), Cost: int64(r.IntN(1 << 20)),
			RequestID: str(), Seq: r.Uint64() >> 12, Terminated: []lineage.Termination{"", lineage.ScarLimitReached}[r.IntN(2)]}
		if r.IntN(2) == 0 {
			v.Scar = &lineage.Scar{Severity: lineage.Severe, Weight: int64(r.IntN(100))}
		}
		args := map[string]any{str(): str(), "n": json.Number("12.5"), str(): []any{str(), true, nil}}
		raw, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		canonArgs, err := jcs.Transform(raw)
		if err != nil {
			t.Fatal(err)
		}
		items := []item{
			{kind: lineage.KindAction, args: canonArgs, body: &lineage.ActionBody{
				Request: lineage.RecordedRequest{ID: str(), Tool: "pay", Args: args}, Verdict: v}},
			{kind: lineage.KindApproval, body: &lineage.ApprovalBody{RequestID: str(), Approver: str(), Approved: r.IntN(2) == 0, Verdict: v}},
			{kind: lineage.KindTermination, body: &lineage.TerminationBody{Reason: lineage.Killed, By: str(), Note: str()}},
		}
		for _, it := range items {
			got, err := canonicalBody(it)
			if err != nil {
				t.Fatal(err)
			}
			// The library's canonical form of the body struct itself.
			raw, err := json.Marshal(it.body)
			if err != nil {
				t.Fatal(err)
			}
			want, err := jcs.Transform(raw)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s body is not the canonical JSON of the body:\n got  %s\n want %s", it.kind, got, want)
			}
			if !bytes.ContainsRune(got, '\u2028') && !bytes.ContainsRune(got, '\u2029') {
				fast++
			}
		}
	}
	if fast < 1000 {
		t.Fatalf("only %d bodies took the encoding/json path; the test must exercise it", fast)
	}
}
