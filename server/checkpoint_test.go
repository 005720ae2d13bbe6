package server_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/checkpoint"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/server"
)

// checkpointKeys makes a key pair: a config edit that signs with its private
// key, and its public key.
func checkpointKeys(t testing.TB) (func(*server.Config), note.Verifier) {
	t.Helper()
	skey, vkey, err := checkpoint.GenerateKey("guard")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := checkpoint.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := checkpoint.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return func(c *server.Config) { c.CheckpointSigner = signer }, verifier
}

// startSigning is a server with a checkpoint key; it returns the public key.
func startSigning(t *testing.T) (*env, note.Verifier) {
	t.Helper()
	edit, verifier := checkpointKeys(t)
	return startWith(t, edit), verifier
}

// pay sends n allowed requests.
func pay(t *testing.T, bot *client.Client, agent string, n int) {
	t.Helper()
	for range n {
		v, err := bot.Request(bg, agent, lineage.Request{Tool: "pay", Args: map[string]any{"amount": json.Number("1")}})
		if err != nil || v.Decision != lineage.Allow {
			t.Fatalf("request: %+v %v", v, err)
		}
	}
}

// served reads the agent's log through the API and verifies its chain.
func served(t *testing.T, c *client.Client, agent string) []lineage.Record {
	t.Helper()
	b, err := c.Log(bg, agent, 0)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(b, []byte{'\n'}), []byte{'\n'})
	recs, err := runtime.VerifyLines(func(fn func(uint64, []byte) error) error {
		for i, l := range lines {
			if err := fn(uint64(i), l); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// leaf is the RFC 6962 leaf hash of a record: of its hash's 32 bytes.
func leaf(t *testing.T, rec lineage.Record) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.TrimPrefix(rec.Hash, "sha256:"))
	if err != nil || len(b) != 32 {
		t.Fatalf("record %d hash %q", rec.Seq, rec.Hash)
	}
	return rfc6962.DefaultHasher.HashLeaf(b)
}

// verifyProof checks a served proof of rec with the merkle library's verifier
// against the root of a signed checkpoint.
func verifyProof(t *testing.T, p checkpoint.Proof, rec lineage.Record, c checkpoint.Checkpoint) {
	t.Helper()
	if p.Seq != rec.Seq || p.RecordHash != rec.Hash || p.Size != c.Size || p.Agent != c.Agent {
		t.Fatalf("proof %+v is not of record %d (%s) at size %d", p, rec.Seq, rec.Hash, c.Size)
	}
	hs := make([][]byte, len(p.Hashes))
	for i, s := range p.Hashes {
		var err error
		if hs[i], err = base64.StdEncoding.DecodeString(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.Seq, p.Size, leaf(t, rec), hs, c.Root); err != nil {
		t.Errorf("record %d of %d: %v", p.Seq, p.Size, err)
	}
}

func TestCheckpointSignedAndProved(t *testing.T) {
	e, verifier := startSigning(t)
	agent, bot := e.agent()
	pay(t, bot, agent, 3)

	// The agent reads its own log's checkpoint; it is the log served.
	msg, err := bot.Checkpoint(bg, agent)
	if err != nil {
		t.Fatal(err)
	}
	c1, err := checkpoint.Open(msg, verifier)
	if err != nil {
		t.Fatalf("open %q: %v", msg, err)
	}
	recs := served(t, e.admin, agent)
	if c1.Agent != agent || c1.Size != uint64(len(recs)) || c1.Size != uint64(e.lines(agent)) || c1.Head != recs[len(recs)-1].Hash {
		t.Fatalf("checkpoint %+v of a log of %d records (head %s)", c1, len(recs), recs[len(recs)-1].Hash)
	}
	if res := checkpoint.Verify(recs, c1, nil); !res.OK {
		t.Fatalf("the served log does not match its checkpoint: %+v", res)
	}
	st, ct := e.rawType("GET", "/v1/agents/"+agent+"/checkpoint", e.tokens["approver"])
	if st != http.StatusOK || ct != "text/plain; charset=utf-8" {
		t.Errorf("approver: %d %q", st, ct)
	}
	for _, rec := range recs {
		p, err := bot.Proof(bg, agent, rec.Seq)
		if err != nil {
			t.Fatal(err)
		}
		verifyProof(t, p, rec, c1)
	}

	// The log grows: so does the checkpoint, consistently with the first.
	pay(t, bot, agent, 4)
	msg2, err := e.approver.Checkpoint(bg, agent)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := checkpoint.Open(msg2, verifier)
	if err != nil {
		t.Fatal(err)
	}
	recs2 := served(t, e.admin, agent)
	if c2.Size != c1.Size+4 || c2.Size != uint64(len(recs2)) {
		t.Fatalf("after 4 more requests the checkpoint has %d records (first %d, log %d)", c2.Size, c1.Size, len(recs2))
	}
	cons, err := checkpoint.ConsistencyProof(recs2, c1.Size, c2.Size)
	if err != nil {
		t.Fatal(err)
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, c1.Size, c2.Size, cons, c1.Root, c2.Root); err != nil {
		t.Errorf("checkpoint %d → %d: %v", c1.Size, c2.Size, err)
	}
	// A proof against the older checkpoint, by its size.
	p, err := e.admin.ProofAt(bg, agent, 2, c1.Size)
	if err != nil {
		t.Fatal(err)
	}
	verifyProof(t, p, recs2[2], c1)
	last := recs2[len(recs2)-1]
	p, err = e.admin.Proof(bg, agent, last.Seq)
	if err != nil {
		t.Fatal(err)
	}
	verifyProof(t, p, last, c2)
}

func TestCheckpointErrors(t *testing.T) {
	e, _ := startSigning(t)
	agent, bot := e.agent()
	other, otherBot := e.agent()
	n := e.lines(agent)
	base := "/v1/agents/" + agent
	cases := []struct {
		name, path, token string
		status            int
		code              string
	}{
		{"no token", base + "/checkpoint", "", 401, "unauthorized"},
		{"no token, proof", base + "/proof/0", "", 401, "unauthorized"},
		{"another agent", base + "/checkpoint", e.agentToken(other), 403, "forbidden"},
		{"another agent, proof", base + "/proof/0", e.agentToken(other), 403, "forbidden"},
		{"unknown agent", "/v1/agents/agt_nobody/checkpoint", e.tokens["admin"], 404, "unknown_agent"},
		{"unknown agent, proof", "/v1/agents/agt_nobody/proof/0", e.tokens["admin"], 404, "unknown_agent"},
		{"seq beyond the log", base + "/proof/" + strconv.Itoa(n), e.tokens["admin"], 404, "unknown_record"},
		{"seq beyond the size", base + "/proof/1?size=1", e.tokens["admin"], 404, "unknown_record"},
		{"size beyond the log", base + "/proof/0?size=" + strconv.Itoa(n+1), e.tokens["admin"], 404, "unknown_record"},
		{"seq not a number", base + "/proof/x", e.tokens["admin"], 400, "bad_request"},
		{"seq signed", base + "/proof/+1", e.tokens["admin"], 400, "bad_request"},
		{"size zero", base + "/proof/0?size=0", e.tokens["admin"], 400, "bad_request"},
		{"unknown parameter", base + "/proof/0?from=1", e.tokens["admin"], 400, "bad_request"},
		{"checkpoint parameter", base + "/checkpoint?size=1", e.tokens["admin"], 400, "bad_request"},
	}
	for _, tc := range cases {
		status, body := e.raw("GET", tc.path, tc.token, "")
		if status != tc.status || body["code"] != tc.code {
			t.Errorf("%s: %d %v, want %d %s", tc.name, status, body, tc.status, tc.code)
		}
	}
	if _, err := otherBot.Checkpoint(bg, agent); !errors.Is(err, lineage.ErrForbidden) {
		t.Errorf("client, another agent: %v", err)
	}
	_, err := bot.Proof(bg, agent, uint64(n))
	var ce *api.Error
	if !errors.As(err, &ce) || ce.Code != api.CodeUnknownRecord || ce.Status != 404 {
		t.Errorf("client, seq beyond the log: %v", err)
	}
}

func TestCheckpointWithoutKey(t *testing.T) {
	e := start(t)
	agent, bot := e.agent()
	for _, p := range []string{"/checkpoint", "/proof/0"} {
		status, body := e.raw("GET", "/v1/agents/"+agent+p, e.tokens["admin"], "")
		if status != http.StatusNotImplemented || body["code"] != api.CodeNoCheckpointKey {
			t.Errorf("%s without a key: %d %v", p, status, body)
		}
	}
	var ce *api.Error
	if _, err := bot.Checkpoint(bg, agent); !errors.As(err, &ce) || ce.Code != api.CodeNoCheckpointKey {
		t.Errorf("client: %v", err)
	}
}

// TestCheckpointRefusesARewrittenLog: once the server signed a checkpoint of
// a log, a log rewritten on disk and re-hashed (its chain valid, its length
// the same, so the store does not notice) is named, not signed (D152: a log must extend the server's last checkpoint): the
// new records do not follow the signed head (D201: the new records, strictly, from the signed head). While the log has not
// grown the server serves the note it signed and reads nothing (D203: a GET waits for what was acknowledged before it). The
// interval is long, so the new record is read when the GET asks for it,
// after the rewrite.
func TestCheckpointRefusesARewrittenLog(t *testing.T) {
	e, verifier := startGrowing(t, time.Hour, 0)
	agent, bot := e.agent()
	pay(t, bot, agent, 3)
	signed, err := e.admin.Checkpoint(bg, agent)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.Open(signed, verifier); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(e.dir, agent+".jsonl")
	forge := func() { t.Helper(); forgeRecord(t, e, agent, 3) }
	orig, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	forge() // not grown: the note signed before, unread
	if again, err := e.admin.Checkpoint(bg, agent); err != nil || !bytes.Equal(again, signed) {
		t.Errorf("an unchanged log's checkpoint: %v\n%s\nwant the note signed before:\n%s", err, again, signed)
	}
	if err := os.WriteFile(file, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	pay(t, bot, agent, 1)
	forge() // grown and rewritten: refused
	for _, p := range []string{"/checkpoint", "/proof/0"} {
		status, body := e.raw("GET", "/v1/agents/"+agent+p, e.tokens["admin"], "")
		if status != http.StatusInternalServerError || body["code"] != api.CodeCheckpointDiverged {
			t.Errorf("%s of a rewritten log: %d %v", p, status, body)
		}
	}
}

// rawType sends a GET and returns the status and the Content-Type.
func (e *env) rawType(method, path, token string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Content-Type")
}

// TestCheckpointWhileTheLogGrows: checkpoints asked for while requests are
// decided all open, and each later one extends each earlier one.
func TestCheckpointWhileTheLogGrows(t *testing.T) {
	e, verifier := startSigning(t)
	agent, bot := e.agent()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			if _, err := bot.Request(bg, agent, lineage.Request{Tool: "pay", Args: map[string]any{"amount": json.Number("1")}}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	notes := make(chan checkpoint.Checkpoint, 64)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				msg, err := e.approver.Checkpoint(bg, agent)
				if err != nil {
					t.Error(err)
					return
				}
				c, err := checkpoint.Open(msg, verifier)
				if err != nil {
					t.Error(err)
					return
				}
				select {
				case notes <- c:
				default:
				}
			}
		}()
	}
	wg.Wait()
	close(notes)
	recs := served(t, e.admin, agent)
	n := 0
	for c := range notes {
		if res := checkpoint.Verify(recs, c, nil); !res.OK {
			t.Errorf("checkpoint of %d records: the final log does not extend it: %s", c.Size, res.Reason)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no checkpoint was served while the log grew")
	}
}
