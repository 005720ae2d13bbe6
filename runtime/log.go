package runtime

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/lineage-guard/lineage"
)

// unsigned is a record without its hash: what the hash covers (SPEC §1).
type unsigned struct {
	Seq  uint64          `json:"seq"`
	At   lineage.Time    `json:"at"`
	Kind lineage.Kind    `json:"kind"`
	Prev string          `json:"prev"`
	Body json.RawMessage `json:"body"`
}

// sealRecord computes the record's hash and its stored form: the canonical JSON
// (RFC 8785) of the whole record, hash included, on one line.
func sealRecord(seq uint64, at time.Time, kind lineage.Kind, prev string, body any) (lineage.Record, []byte, error) {
	rawBody, err := json.Marshal(body)
	if err != nil {
		return lineage.Record{}, nil, err
	}
	u := unsigned{Seq: seq, At: lineage.Time{Time: at.UTC()}, Kind: kind, Prev: prev, Body: rawBody}
	hash, canonBody, err := hashOf(u)
	if err != nil {
		return lineage.Record{}, nil, err
	}
	rec := lineage.Record{Seq: seq, At: u.At, Kind: kind, Prev: prev, Body: canonBody, Hash: hash}
	line, err := canonicalJSON(rec)
	if err != nil {
		return lineage.Record{}, nil, err
	}
	return rec, line, nil
}

// hashOf returns "sha256:<hex>" of the canonical JSON of u, and u's body in canonical form.
func hashOf(u unsigned) (string, json.RawMessage, error) {
	canon, err := canonicalJSON(u)
	if err != nil {
		return "", nil, err
	}
	body, err := jcs.Transform(u.Body)
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), body, nil
}

func canonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(raw)
}

// ChainError reports the first record of a log that fails verification.
type ChainError struct {
	Seq    uint64
	Reason string
}

func (e *ChainError) Error() string {
	return fmt.Sprintf("log damaged at seq %d: %s", e.Seq, e.Reason)
}

// Is makes a ChainError match lineage.ErrCorrupt.
func (e *ChainError) Is(target error) bool { return target == lineage.ErrCorrupt }

// openRecord parses and checks one stored line as record seq following prev:
// the line must be exactly the canonical form of a record whose seq and prev are
// the expected ones and whose hash is right. Any other byte (a flipped bit, a
// re-encoded number, a changed letter case) fails.
func openRecord(line []byte, seq uint64, prev string) (lineage.Record, error) {
	var rec lineage.Record
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return rec, &ChainError{Seq: seq, Reason: "not a record: " + err.Error()}
	}
	if rec.Seq != seq {
		return rec, &ChainError{Seq: seq, Reason: fmt.Sprintf("seq is %d, expected %d", rec.Seq, seq)}
	}
	if rec.Prev != prev {
		return rec, &ChainError{Seq: seq, Reason: "prev does not match the previous record's hash"}
	}
	hash, _, err := hashOf(unsigned{Seq: rec.Seq, At: rec.At, Kind: rec.Kind, Prev: rec.Prev, Body: rec.Body})
	if err != nil {
		return rec, &ChainError{Seq: seq, Reason: err.Error()}
	}
	if hash != rec.Hash {
		return rec, &ChainError{Seq: seq, Reason: "hash does not match the record's content"}
	}
	canon, err := canonicalJSON(rec)
	if err != nil || !bytes.Equal(canon, line) {
		return rec, &ChainError{Seq: seq, Reason: "record is not in canonical form"}
	}
	return rec, nil
}

// VerifyLines checks a whole log given as its stored lines, in order. It returns
// the records, and a *ChainError naming the first bad seq if any.
func VerifyLines(scan func(fn func(seq uint64, line []byte) error) error) ([]lineage.Record, error) {
	var (
		recs     []lineage.Record
		prev     string
		prevKind lineage.Kind
	)
	err := scan(func(seq uint64, line []byte) error {
		rec, err := openRecord(line, seq, prev)
		if err != nil {
			return err
		}
		if err := kindFollows(rec, seq, prevKind); err != nil {
			return err
		}
		prevKind = rec.Kind
		prev = rec.Hash
		recs = append(recs, rec)
		return nil
	})
	return recs, err
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
