package server_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/server"
)

// oneMark is a store.Marks that keeps one mark, or fails to read it.
type oneMark struct {
	mark store.Mark
	err  error
}

func (m oneMark) LoadMark(string) (store.Mark, error) { return m.mark, m.err }
func (m oneMark) StoreMark(string, store.Mark) error  { return errors.New("read only") }

// TestVerifyResultOf pins the one shape of verify's answer that the API,
// the inbox and `lineagec verify` on a local store share: the intact
// records and their head always, then ok or the first bad seq and why; a
// damaged mark is damage, another failure an error.
func TestVerifyResultOf(t *testing.T) {
	recs := []lineage.Record{{Seq: 0, Hash: "sha256:a"}, {Seq: 1, Hash: "sha256:b"}, {Seq: 2, Hash: "sha256:c"}}
	u := func(n uint64) *uint64 { return &n }
	i := func(n int) *int { return &n }
	boom := errors.New("boom")
	for _, c := range []struct {
		name    string
		recs    []lineage.Record
		readErr error
		marks   store.Marks
		want    api.VerifyResult
		wantErr error
	}{
		{"intact", recs, nil, nil, api.VerifyResult{OK: true, Records: i(3), Head: "sha256:c"}, nil},
		{"chain broken at 2", recs[:2], &runtime.ChainError{Seq: 2, Reason: "prev mismatch"}, nil,
			api.VerifyResult{Records: i(2), Head: "sha256:b", Seq: u(2), Message: "prev mismatch"}, nil},
		{"damaged at 1", recs[:1], &store.DamageError{Seq: 1, Reason: "empty line"}, nil,
			api.VerifyResult{Records: i(1), Head: "sha256:a", Seq: u(1), Message: "empty line"}, nil},
		{"before its policy", recs[:1], nil, nil, api.VerifyResult{Records: i(1), Head: "sha256:a", Seq: u(1), Message: "log ends before its policy record"}, nil},
		{"not damage", nil, boom, nil, api.VerifyResult{}, boom},
		{"extends its mark", recs, nil, oneMark{mark: store.Mark{Size: 2, Head: "sha256:b"}}, api.VerifyResult{OK: true, Records: i(3), Head: "sha256:c"}, nil},
		{"rewritten under its mark", recs, nil, oneMark{mark: store.Mark{Size: 2, Head: "sha256:x"}},
			api.VerifyResult{Records: i(3), Head: "sha256:c", Seq: u(1)}, nil},
		{"damaged mark", recs, nil, oneMark{err: &store.DamageError{Seq: 0, Reason: "bad mark"}},
			api.VerifyResult{Records: i(3), Head: "sha256:c", Seq: u(0), Message: "bad mark"}, nil},
		{"unreadable mark", recs, nil, oneMark{err: boom}, api.VerifyResult{}, boom},
	} {
		got, err := server.VerifyResultOf("agt_x", c.recs, c.readErr, c.marks)
		if !errors.Is(err, c.wantErr) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.wantErr)
		}
		if c.name == "rewritten under its mark" {
			if len(got.Message) < len(api.CodeCheckpointDiverged) || got.Message[:len(api.CodeCheckpointDiverged)] != api.CodeCheckpointDiverged {
				t.Errorf("%s: message %q, want it to start with %s", c.name, got.Message, api.CodeCheckpointDiverged)
			}
			got.Message = ""
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
