package checkpoint_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/merkle/testonly"
	"golang.org/x/mod/sumdb/note"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/checkpoint"
	"github.com/lineage-guard/lineage/checkpoint/checkpointtest"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

var genesis = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

const invoicePolicy = `
budget: 100
tools:
  read: { cost: 0 }
  pay: { cost: 1, requires_approval: true }
`

// makeLog writes a real log through the runtime: genesis, policy, then one
// record per tool in tools (an unlisted tool is a scarred deny), and returns
// its verified records. Agents of the same id and the same tools up to a
// point share that prefix byte for byte (forks).
func makeLog(t testing.TB, id string, tools ...string) []lineage.Record {
	t.Helper()
	recs, err := buildLog(id, tools...)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func buildLog(id string, tools ...string) ([]lineage.Record, error) {
	ctx := context.Background()
	c, err := compiler.Compile("policy.yaml", []byte(invoicePolicy))
	if err != nil {
		return nil, err
	}
	rt := runtime.Open(memory.New(), runtime.Options{NewAgentID: func() string { return id }})
	agent, err := rt.CreateAgent(ctx, c, runtime.CreateOptions{At: genesis, Name: "bot"})
	if err != nil {
		return nil, err
	}
	for i, tool := range tools {
		if _, err := rt.Request(ctx, agent, lineage.Request{Tool: tool, Args: map[string]any{"n": json.Number(fmt.Sprint(i))},
			At: genesis.Add(time.Duration(i+1) * time.Second)}); err != nil {
			return nil, err
		}
	}
	return rt.Records(agent)
}

func keys(t testing.TB, name string) (string, string) {
	t.Helper()
	skey, vkey, err := checkpoint.GenerateKey(name)
	if err != nil {
		t.Fatal(err)
	}
	return skey, vkey
}

func signed(t testing.TB, recs []lineage.Record, skey string) []byte {
	t.Helper()
	s, err := checkpoint.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := checkpoint.SignRecords(recs, s)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func open(t testing.TB, msg []byte, vkey string) checkpoint.Checkpoint {
	t.Helper()
	v, err := checkpoint.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Open(msg, v)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rehash rewrites record k with edit and re-hashes the chain after it
// (checkpointtest.Rehash); the result must verify on its own.
func rehash(t testing.TB, recs []lineage.Record, k int, edit func([]byte) []byte) []lineage.Record {
	t.Helper()
	var lines [][]byte
	for _, r := range recs {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if line, err = jcs.Transform(line); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
	}
	lines, err := checkpointtest.Rehash(lines, k, edit)
	if err != nil {
		t.Fatal(err)
	}
	out, err := runtime.VerifyLines(func(fn func(uint64, []byte) error) error {
		for i, l := range lines {
			if err := fn(uint64(i), l); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the rewritten log does not verify on its own, so it proves nothing: %v", err)
	}
	return out
}

func TestCheckpointTextIsC2SP(t *testing.T) {
	recs := makeLog(t, "agt_text", "read", "pay")
	c, err := checkpoint.New(recs)
	if err != nil {
		t.Fatal(err)
	}
	root := testonly.New(rfc6962.DefaultHasher)
	for _, r := range recs {
		b, _ := hex.DecodeString(strings.TrimPrefix(r.Hash, "sha256:"))
		root.AppendData(b)
	}
	want := fmt.Sprintf("lineage/agt_text\n4\n%s\nhead %s\n", base64.StdEncoding.EncodeToString(root.Hash()), recs[3].Hash)
	if c.Text() != want {
		t.Fatalf("text\n%s\nwant (root by the merkle module's reference tree)\n%s", c.Text(), want)
	}
	back, err := checkpoint.Parse(c.Text())
	if err != nil || back.Text() != want {
		t.Fatalf("Parse(Text()) = %v, %v", back, err)
	}
}

func TestSignOpenVerify(t *testing.T) {
	skey, vkey := keys(t, "lineage-test")
	recs := makeLog(t, "agt_a", "read", "pay", "read")
	msg := signed(t, recs, skey)
	c := open(t, msg, vkey)
	if c.Agent != "agt_a" || c.Size != uint64(len(recs)) || c.Head != recs[len(recs)-1].Hash {
		t.Fatalf("checkpoint %+v", c)
	}
	for _, hashes := range [][]string{nil, hashesOf(recs)} {
		if res := checkpoint.Verify(recs, c, hashes); !res.OK {
			t.Fatalf("the checkpointed log itself: %+v", res)
		}
		longer := makeLog(t, "agt_a", "read", "pay", "read", "read", "run_shell")
		if res := checkpoint.Verify(longer, c, hashes); !res.OK || res.Records != uint64(len(longer)) {
			t.Fatalf("an extension: %+v", res)
		}
	}
}

func hashesOf(recs []lineage.Record) []string {
	var hs []string
	for _, r := range recs {
		hs = append(hs, r.Hash)
	}
	return hs
}

func TestInclusionAndConsistencyProofsVerifyWithTheLibrary(t *testing.T) {
	recs := makeLog(t, "agt_p", "read", "pay", "read", "x", "read", "pay", "read", "read", "read", "pay", "read")
	ref := testonly.New(rfc6962.DefaultHasher)
	for _, r := range recs {
		b, _ := hex.DecodeString(strings.TrimPrefix(r.Hash, "sha256:"))
		ref.AppendData(b)
	}
	for size := uint64(1); size <= uint64(len(recs)); size++ {
		root := ref.HashAt(size)
		for seq := uint64(0); seq < size; seq++ {
			p, err := checkpoint.InclusionProof(recs, seq, size)
			if err != nil {
				t.Fatal(err)
			}
			hs := decode(t, p.Hashes)
			b, _ := hex.DecodeString(strings.TrimPrefix(p.RecordHash, "sha256:"))
			if err := proof.VerifyInclusion(rfc6962.DefaultHasher, seq, size, rfc6962.DefaultHasher.HashLeaf(b), hs, root); err != nil {
				t.Fatalf("inclusion of %d in %d: %v", seq, size, err)
			}
			if p.Root != base64.StdEncoding.EncodeToString(root) {
				t.Fatalf("root at %d differs from the reference tree", size)
			}
			// A proof for another record does not verify.
			if seq > 0 {
				other, _ := hex.DecodeString(strings.TrimPrefix(recs[seq-1].Hash, "sha256:"))
				if proof.VerifyInclusion(rfc6962.DefaultHasher, seq, size, rfc6962.DefaultHasher.HashLeaf(other), hs, root) == nil {
					t.Fatalf("proof of %d verifies record %d", seq, seq-1)
				}
			}
		}
		for size2 := size; size2 <= uint64(len(recs)); size2++ {
			cons, err := checkpoint.ConsistencyProof(recs, size, size2)
			if err != nil {
				t.Fatal(err)
			}
			if err := proof.VerifyConsistency(rfc6962.DefaultHasher, size, size2, cons, root, ref.HashAt(size2)); err != nil {
				t.Fatalf("consistency %d→%d: %v", size, size2, err)
			}
		}
	}
	// Proof.Verify against a signed checkpoint.
	skey, vkey := keys(t, "k")
	c := open(t, signed(t, recs, skey), vkey)
	p, err := checkpoint.InclusionProof(recs, 5, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(c); err != nil {
		t.Fatal(err)
	}
	p.RecordHash = recs[4].Hash
	if p.Verify(c) == nil {
		t.Fatal("a proof with another record hash verified")
	}
	if _, err := checkpoint.InclusionProof(recs, uint64(len(recs)), 0); !errors.Is(err, checkpoint.ErrBadLog) {
		t.Fatalf("proof beyond the log: %v", err)
	}
}

func decode(t testing.TB, b64 []string) [][]byte {
	var out [][]byte
	for _, s := range b64 {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// editPolicy raises a policy body's budget and recomputes its digest, as a
// forger who can write the folder would (verify then passes on its own).
func editPolicy(t testing.TB, body []byte) []byte {
	t.Helper()
	var b struct {
		Digest string         `json:"digest"`
		Policy map[string]any `json:"policy"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatal(err)
	}
	b.Policy["budget"] = 1000
	doc, err := json.Marshal(b.Policy)
	if err != nil {
		t.Fatal(err)
	}
	if doc, err = jcs.Transform(doc); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(doc)
	b.Digest = "sha256:" + hex.EncodeToString(sum[:])
	out, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDivergenceIsNamed(t *testing.T) {
	skey, vkey := keys(t, "lineage-test")
	tools := []string{"read", "pay", "read", "run_shell", "read"}
	recs := makeLog(t, "agt_d", tools...)
	msg := signed(t, recs, skey)
	c := open(t, msg, vkey)
	list := hashesOf(recs)
	longer := makeLog(t, "agt_d", append(tools, "read", "read")...)

	type want struct {
		seq, upto uint64
		reason    string
	}
	cases := []struct {
		name   string
		log    []lineage.Record
		list   want // with the checkpoint's record list
		bare   want // with the note alone
		ignore bool // the list is not used
	}{
		{name: "truncated", log: recs[:4], list: want{4, 4, "truncated"}, bare: want{0, 4, "truncated"}},
		{name: "fork after the policy", log: makeLog(t, "agt_d", "read", "read", "read", "read", "read", "read"),
			list: want{3, 3, "rewritten or forked"}, bare: want{0, 6, "do not match"}},
		{name: "another agent", log: makeLog(t, "agt_other", tools...), list: want{0, 0, "of agent agt_d, the log of agent agt_other"}, bare: want{0, 0, "agt_other"}},
	}
	for k := 0; k < len(recs); k++ {
		cases = append(cases, struct {
			name   string
			log    []lineage.Record
			list   want
			bare   want
			ignore bool
		}{name: fmt.Sprintf("rewrite of seq %d", k), log: rehash(t, longer, k, func(b []byte) []byte {
			if bytes.Contains(b, []byte(`"bot"`)) { // genesis: rename the agent's name
				return bytes.Replace(b, []byte(`"bot"`), []byte(`"bob"`), 1)
			}
			if bytes.Contains(b, []byte(`"digest":`)) { // policy: a bigger budget, its digest recomputed
				return editPolicy(t, b)
			}
			return bytes.Replace(b, []byte(`":"`), []byte(`":"x`), 1) // the first string value gets an x
		}), list: want{uint64(k), uint64(k), "rewritten"}, bare: want{0, 6, "do not match"}})
	}
	for _, tc := range cases {
		for _, withList := range []bool{true, false} {
			hs, w := list, tc.list
			if !withList {
				hs, w = nil, tc.bare
			}
			res := checkpoint.Verify(tc.log, c, hs)
			if res.OK || res.Seq == nil || *res.Seq != w.seq || *res.Upto != w.upto || !strings.Contains(res.Reason, w.reason) || res.ListIgnored != "" {
				t.Errorf("%s (list %v): %+v, want diverges at %d..%d with %q", tc.name, withList, res, w.seq, w.upto, w.reason)
			}
		}
	}
	// A record list that does not belong to the signed root is not trusted.
	bad := append([]string(nil), list...)
	bad[2] = longer[6].Hash
	res := checkpoint.Verify(recs, c, bad)
	if !res.OK || res.ListIgnored == "" {
		t.Fatalf("a wrong list: %+v", res)
	}
}

func TestNoteErrorsAreNamed(t *testing.T) {
	skey, vkey := keys(t, "lineage-test")
	_, otherV := keys(t, "lineage-test") // same name, another key
	otherS, _ := keys(t, "someone-else")
	recs := makeLog(t, "agt_n", "read")
	msg := signed(t, recs, skey)
	v, _ := checkpoint.NewVerifier(vkey)
	ov, _ := checkpoint.NewVerifier(otherV)

	if _, err := checkpoint.Open(msg, ov); !errors.Is(err, checkpoint.ErrWrongKey) || !strings.Contains(err.Error(), "signed by lineage-test+") {
		t.Errorf("verified with another key: %v", err)
	}
	if _, err := checkpoint.Open(signed(t, recs, otherS), v); !errors.Is(err, checkpoint.ErrWrongKey) || !strings.Contains(err.Error(), "someone-else") {
		t.Errorf("signed by another key: %v", err)
	}
	damaged := map[string][]byte{
		"a changed size":      bytes.Replace(msg, []byte("\n3\n"), []byte("\n4\n"), 1),
		"a changed signature": append(bytes.Clone(msg[:len(msg)-6]), []byte("AAAA=\n")...),
		"cut off":             msg[:len(msg)/2],
		"no signature":        msg[:bytes.Index(msg, []byte("\n\n"))+2],
		"empty":               nil,
		"a control character": bytes.Replace(msg, []byte("lineage/"), []byte("line\x01age/"), 1),
	}
	for name, m := range damaged {
		if bytes.Equal(m, msg) {
			t.Fatalf("%s: the damage did not apply", name)
		}
		if _, err := checkpoint.Open(m, v); !errors.Is(err, checkpoint.ErrDamaged) {
			t.Errorf("%s: %v, want %v", name, err, checkpoint.ErrDamaged)
		}
	}
	// A well-signed note whose text is not a checkpoint.
	s, _ := checkpoint.NewSigner(skey)
	for _, text := range []string{"hello\n", "lineage/agt_n\n0\nAAAA\nhead x\n", "other/agt\n1\n" + strings.Repeat("A", 43) + "=\nhead sha256:00\n"} {
		n, err := note.Sign(&note.Note{Text: text}, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := checkpoint.Open(n, v); !errors.Is(err, checkpoint.ErrDamaged) {
			t.Errorf("text %q: %v", text, err)
		}
	}
	if _, err := checkpoint.NewVerifier("not a key"); !errors.Is(err, checkpoint.ErrBadKey) {
		t.Errorf("bad verifier key: %v", err)
	}
	if _, err := checkpoint.NewSigner(vkey); !errors.Is(err, checkpoint.ErrBadKey) {
		t.Errorf("a public key as a signer: %v", err)
	}
	if _, _, err := checkpoint.GenerateKey("has space"); !errors.Is(err, checkpoint.ErrBadKey) {
		t.Errorf("bad key name: %v", err)
	}
}

func TestBundle(t *testing.T) {
	skey, _ := keys(t, "k")
	recs := makeLog(t, "agt_b", "read")
	msg := signed(t, recs, skey)
	for _, file := range [][]byte{msg, checkpoint.Bundle(msg, recs)} {
		note, hs, err := checkpoint.Unbundle(file)
		if err != nil || !bytes.Equal(note, msg) {
			t.Fatalf("Unbundle: %q %v", note, err)
		}
		if len(file) > len(msg) && strings.Join(hs, ",") != strings.Join(hashesOf(recs), ",") {
			t.Fatalf("hashes %v", hs)
		}
	}
	for _, bad := range [][]byte{append(bytes.Clone(msg), "junk\n"...), append(bytes.Clone(msg), "\nsha256:00"...), []byte("no blank line")} {
		if _, _, err := checkpoint.Unbundle(bad); !errors.Is(err, checkpoint.ErrDamaged) {
			t.Errorf("Unbundle(%q): %v", bad, err)
		}
	}
}

// TestGrowingMatchesNew: the checkpoint kept as records are appended is the
// checkpoint made from the whole log, at every size.
func TestGrowingMatchesNew(t *testing.T) {
	recs := makeLog(t, "agt_g", "read", "pay", "read", "x", "read", "pay", "read", "read", "read")
	g := checkpoint.NewGrowing("agt_g")
	if _, err := g.Checkpoint(); !errors.Is(err, checkpoint.ErrBadLog) {
		t.Fatalf("empty: %v", err)
	}
	for i, r := range recs {
		if err := g.Append(r); err != nil {
			t.Fatal(err)
		}
		got, err := g.Checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		want, err := checkpoint.New(recs[:i+1])
		if err != nil {
			t.Fatal(err)
		}
		if got.Text() != want.Text() {
			t.Fatalf("size %d:\n%s\nwant\n%s", i+1, got.Text(), want.Text())
		}
	}
	if err := g.Append(recs[3]); !errors.Is(err, checkpoint.ErrBadLog) {
		t.Fatalf("a record out of order: %v", err)
	}
}

// TestInclusionProofOfHashes: a proof from the stored hashes against the
// signed checkpoint is the proof from the records, checked by the merkle
// module's verifier; hashes that are not the signed tree (a rewrite, a
// truncation) are ErrDiverged (D204: a proof from the stored hashes).
func TestInclusionProofOfHashes(t *testing.T) {
	recs := makeLog(t, "agt_h", "read", "pay", "read", "x", "read", "pay", "read")
	c, err := checkpoint.New(recs[:6])
	if err != nil {
		t.Fatal(err)
	}
	hashes := hashesOf(recs) // the log grew past the checkpoint
	for size := uint64(1); size <= c.Size; size++ {
		for seq := range size {
			got, err := checkpoint.InclusionProofOf(c, hashes, seq, size)
			if err != nil {
				t.Fatal(err)
			}
			want, err := checkpoint.InclusionProof(recs, seq, size)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("seq %d size %d: %+v, from the records %+v", seq, size, got, want)
			}
		}
	}
	p, err := checkpoint.InclusionProofOf(c, hashes, 4, 0)
	if err != nil || p.Size != c.Size {
		t.Fatalf("size 0 is the checkpoint's: %+v %v", p, err)
	}
	leafIn, _ := hex.DecodeString(strings.TrimPrefix(p.RecordHash, "sha256:"))
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.Seq, p.Size, rfc6962.DefaultHasher.HashLeaf(leafIn), decode(t, p.Hashes), c.Root); err != nil {
		t.Fatalf("the library refuses the proof: %v", err)
	}
	forged := hashesOf(rehash(t, recs, 3, func(b []byte) []byte { return bytes.Replace(b, []byte(`"n":1`), []byte(`"n":9`), 1) }))
	for name, hs := range map[string][]string{"rewritten": forged, "truncated": hashes[:5]} {
		if _, err := checkpoint.InclusionProofOf(c, hs, 0, 0); !errors.Is(err, checkpoint.ErrDiverged) {
			t.Errorf("%s: %v, want ErrDiverged", name, err)
		}
	}
	if _, err := checkpoint.InclusionProofOf(c, hashes, 6, 0); !errors.Is(err, checkpoint.ErrBadLog) {
		t.Errorf("a seq past the checkpoint: %v", err)
	}
	if _, err := checkpoint.InclusionProofOf(c, hashes, 0, 7); !errors.Is(err, checkpoint.ErrBadLog) {
		t.Errorf("a size past the checkpoint: %v", err)
	}
	empty := checkpoint.Checkpoint{Agent: c.Agent, Root: rfc6962.DefaultHasher.EmptyRoot()}
	if _, err := checkpoint.InclusionProofOf(empty, hashes, 0, 0); !errors.Is(err, checkpoint.ErrBadLog) {
		t.Errorf("a checkpoint of no records: %v, want ErrBadLog", err)
	}
}
