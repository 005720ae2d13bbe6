package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

// TestVerifyCompilesThePolicy: `lineagec verify` of a log whose policy record
// no longer compiles (its digest is right) fails at seq 1, as opening the
// agent does (docs/log.md, D53 (verify runs what open runs)); so does one whose policy was edited.
func TestVerifyCompilesThePolicy(t *testing.T) {
	const doc = `{"budget":5,"default_rule":null,"rate_limit":null,"rego":[],"scar_limit":10,"scar_weights":{"minor":1,"moderate":3,"severe":10},"tools":{"pay":{"cost":-1,"requires_approval":false,"when":[]}}}`
	sum := sha256.Sum256([]byte(doc))
	for name, tc := range map[string]struct{ digest, want string }{
		"does not compile": {"sha256:" + hex.EncodeToString(sum[:]), "damaged at seq 1: the policy does not compile"},
		"edited":           {"sha256:" + strings.Repeat("0", 64), "damaged at seq 1: policy digest is sha256:000"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			genesis, head := sealed(t, 0, "genesis", "", `{"agent":"agt_v"}`)
			policy, _ := sealed(t, 1, "policy", head, `{"digest":"`+tc.digest+`","policy":`+doc+`}`)
			path := filepath.Join(dir, "agt_v.jsonl")
			if err := os.WriteFile(path, append(append(genesis, '\n'), append(policy, '\n')...), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"verify", path}, {"--data", dir, "verify", "agt_v"}} {
				var out, errb bytes.Buffer
				if code := run(args, &out, &errb); code != 1 || !strings.Contains(out.String(), tc.want) {
					t.Errorf("lineagec %s: exit %d\nstdout %s\nstderr %s\nwant exit 1 and %q", strings.Join(args, " "), code, out.String(), errb.String(), tc.want)
				}
			}
		})
	}
}

// sealed builds a stored record line as docs/log.md defines it: the JCS of the
// record; its hash the SHA-256 of the JCS without the hash.
func sealed(t *testing.T, seq int, kind, prev, body string) ([]byte, string) {
	t.Helper()
	rec := map[string]any{"seq": seq, "at": "2026-01-01T00:00:00.000000000Z", "kind": kind, "prev": prev, "body": json.RawMessage(body)}
	canon := func() []byte {
		raw, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		out, err := jcs.Transform(raw)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	sum := sha256.Sum256(canon())
	rec["hash"] = "sha256:" + hex.EncodeToString(sum[:])
	return canon(), rec["hash"].(string)
}
