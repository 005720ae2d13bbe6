package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/file"
)

// TestBackupUnderLoad: 64 clients write to 16 agents of a running serve for
// 2 s; a backup through GET /v1/backup (lineagec backup --server) is taken
// in the middle. Restored into a new directory, every log verifies, is a
// prefix of the live log (byte for byte, cut at a record boundary), holds
// every verdict acknowledged before the backup began, and each agent's state
// is the fold of its restored log (spent = the allowed actions' costs, seq =
// the last record). Also: backup --data on the held directory says to use
// --server (D343 (backup of a held directory goes through the server)).
func TestBackupUnderLoad(t *testing.T) {
	data := t.TempDir()
	cmd, url, stderr, wait := startServe(t, data)
	tok, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("LINEAGE_TOKEN", strings.TrimSpace(string(tok)))
	admin, _ := client.New(url, strings.TrimSpace(string(tok)), nil)
	ctx := context.Background()
	const agents, clients = 16, 64
	type bot struct {
		id string
		c  *client.Client
	}
	bots := make([]bot, agents)
	for i := range bots {
		created, err := admin.CreateAgent(ctx, json.RawMessage(`{"budget": 100000000, "tools": {"t": {"cost": 2}}}`), fmt.Sprintf("bot%d", i), "")
		if err != nil {
			t.Fatal(err)
		}
		c, _ := client.New(url, created.Token, nil)
		bots[i] = bot{created.Agent, c}
	}
	type ack struct {
		agent string
		seq   uint64
		at    time.Time
	}
	var (
		mu   sync.Mutex
		acks []ack
		wg   sync.WaitGroup
	)
	stop := time.Now().Add(2 * time.Second)
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := bots[w%agents]
			for time.Now().Before(stop) {
				v, err := b.c.Request(ctx, b.id, lineage.Request{Tool: "t"})
				if err != nil {
					t.Errorf("request: %v", err)
					return
				}
				now := time.Now()
				if v.Seq == 0 {
					t.Errorf("verdict without seq: %+v", v)
					return
				}
				mu.Lock()
				acks = append(acks, ack{b.id, v.Seq, now})
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Second)
	// While serve holds the directory, backup --data says to use --server.
	var out, errb bytes.Buffer
	tar := filepath.Join(t.TempDir(), "b.tar")
	if code := run([]string{"backup", "--data", data, "-o", tar}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "--server") {
		t.Errorf("backup --data of a held directory: exit %d, stderr %q", code, errb.String())
	}
	if _, err := os.Stat(tar); err == nil {
		t.Errorf("a failed backup left %s", tar)
	}
	began := time.Now()
	out.Reset()
	errb.Reset()
	if code := run([]string{"backup", "--server", url, "-o", tar}, &out, &errb); code != 0 {
		t.Fatalf("backup --server: exit %d: %s", code, errb.String())
	}
	t.Logf("%s", strings.TrimSpace(errb.String()))
	wg.Wait()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr())
	}

	restored := filepath.Join(t.TempDir(), "restored")
	out.Reset()
	errb.Reset()
	if code := run([]string{"restore", tar, "--data", restored}, &out, &errb); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, errb.String())
	}
	t.Logf("%s", strings.TrimSpace(out.String()))
	for _, f := range []string{"server.key", "admin.token", file.JournalName, file.LockName} {
		if _, err := os.Stat(filepath.Join(restored, f)); err == nil && f != file.LockName {
			t.Errorf("the restored directory holds %s", f)
		}
	}
	st, err := file.Open(restored, file.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rt := runtime.Open(st, runtime.Options{})
	have := map[string][]lineage.Record{}
	total := 0
	for _, b := range bots {
		recs, err := rt.Records(b.id)
		if err != nil {
			t.Fatalf("%s: the restored log does not verify: %v", b.id, err)
		}
		have[b.id] = recs
		total += len(recs)
		live, err := os.ReadFile(filepath.Join(data, b.id+file.Ext))
		if err != nil {
			t.Fatal(err)
		}
		copied, err := os.ReadFile(filepath.Join(restored, b.id+file.Ext))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(live, copied) || !bytes.HasSuffix(copied, []byte("\n")) {
			t.Errorf("%s: the restored log (%d bytes) is not a prefix of the live log (%d bytes) cut at a record", b.id, len(copied), len(live))
		}
		// The state is the fold of the restored log.
		state, err := rt.State(ctx, b.id)
		if err != nil {
			t.Fatal(err)
		}
		var spent int64
		for _, r := range recs {
			if r.Kind != lineage.KindAction {
				continue
			}
			var body lineage.ActionBody
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatal(err)
			}
			if body.Verdict.Decision == lineage.Allow {
				spent += body.Verdict.Cost
			}
		}
		last := recs[len(recs)-1]
		if state.Seq != last.Seq || state.Head != last.Hash || state.Spent != spent || state.Status != lineage.Alive {
			t.Errorf("%s: state seq %d head %s spent %d status %s; the log ends at %d %s and spends %d",
				b.id, state.Seq, state.Head, state.Spent, state.Status, last.Seq, last.Hash, spent)
		}
	}
	before, after := 0, 0
	for _, a := range acks {
		if !a.at.Before(began) {
			after++
			continue
		}
		before++
		recs := have[a.agent]
		if a.seq >= uint64(len(recs)) || recs[a.seq].Kind != lineage.KindAction {
			t.Errorf("%s: verdict at seq %d was acknowledged before the backup began, but the backup holds %d records", a.agent, a.seq, len(recs))
		}
	}
	t.Logf("%d verdicts acknowledged before the backup began, %d after; the backup holds %d records of %d agents", before, after, total, len(have))
	if before == 0 || after == 0 {
		t.Errorf("the backup did not run under load: %d acknowledged before it, %d after", before, after)
	}

	// With serve stopped, backup --data reads the directory: the copy is the
	// whole live log.
	tar2 := filepath.Join(t.TempDir(), "offline.tar")
	errb.Reset()
	if code := run([]string{"backup", "--data", data, "-o", tar2}, &out, &errb); code != 0 {
		t.Fatalf("backup --data: exit %d: %s", code, errb.String())
	}
	offline := filepath.Join(t.TempDir(), "offline")
	if code := run([]string{"restore", tar2, "--data", offline}, &out, &errb); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, errb.String())
	}
	for _, b := range bots {
		live, _ := os.ReadFile(filepath.Join(data, b.id+file.Ext))
		copied, _ := os.ReadFile(filepath.Join(offline, b.id+file.Ext))
		if !bytes.Equal(live, copied) {
			t.Errorf("%s: the offline backup's log (%d bytes) is not the log (%d bytes)", b.id, len(copied), len(live))
		}
	}

	// Restore refuses a directory that holds files, and a backup cut short.
	errb.Reset()
	if code := run([]string{"restore", tar, "--data", data}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "not empty") {
		t.Errorf("restore into a non-empty directory: exit %d, %q", code, errb.String())
	}
	b, _ := os.ReadFile(tar)
	short := filepath.Join(t.TempDir(), "short.tar")
	os.WriteFile(short, b[:len(b)/2], 0o644)
	errb.Reset()
	into := filepath.Join(t.TempDir(), "x")
	if code := run([]string{"restore", short, "--data", into}, &out, &errb); code == 0 {
		t.Errorf("restore of a cut backup: exit 0")
	}
	if _, err := os.Stat(into); err == nil {
		t.Errorf("a failed restore made %s", into)
	}
	// A record changed in the tar: the log does not verify, nothing is made.
	forged := filepath.Join(t.TempDir(), "forged.tar")
	if err := os.WriteFile(forged, forgeTar(t, b), 0o644); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run([]string{"restore", forged, "--data", into}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "does not verify") {
		t.Errorf("restore of a forged backup: exit %d, %q", code, errb.String())
	}
	if _, err := os.Stat(into); err == nil {
		t.Errorf("a failed restore made %s", into)
	}
}

// forgeTar changes the cost of the last allowed action of the first log in
// the tar b (its hash left as it was).
func forgeTar(t *testing.T, b []byte) []byte {
	tr := tar.NewReader(bytes.NewReader(b))
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	done := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		if !done && strings.HasSuffix(h.Name, file.Ext) {
			i := bytes.LastIndex(body, []byte(`"cost":2`))
			if i < 0 {
				t.Fatalf("no cost in %s", h.Name)
			}
			body = append(append(append([]byte{}, body[:i]...), []byte(`"cost":1`)...), body[i+len(`"cost":2`):]...)
			done = true
		}
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	tw.Close()
	return out.Bytes()
}
