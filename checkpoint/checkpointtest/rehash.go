// Package checkpointtest forges logs for tests: it rewrites a record the way
// someone who can write the log's folder would, and re-hashes the chain after
// it so that the log verifies on its own again. It is what signed checkpoints
// exist to catch; nothing outside tests imports it.
package checkpointtest

import (
	"encoding/json"
	"fmt"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/internal/canon"
)

// Rehash takes a log's stored lines, replaces record k's body by edit(body),
// and recomputes prev and hash of every record from k on (docs/log.md: SHA-256 of
// the canonical JSON of the record without its hash). It returns the new lines.
func Rehash(lines [][]byte, k int, edit func(body []byte) []byte) ([][]byte, error) {
	out := make([][]byte, len(lines))
	prev := ""
	for i, line := range lines {
		var r lineage.Record
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("seq %d: %v", i, err)
		}
		if i < k {
			out[i], prev = line, r.Hash
			continue
		}
		if i == k {
			r.Body = edit(append([]byte(nil), r.Body...))
		}
		r.Prev = prev
		unsigned, err := json.Marshal(struct {
			Seq  uint64          `json:"seq"`
			At   lineage.Time    `json:"at"`
			Kind lineage.Kind    `json:"kind"`
			Prev string          `json:"prev"`
			Body json.RawMessage `json:"body"`
		}{r.Seq, r.At, r.Kind, r.Prev, r.Body})
		if err != nil {
			return nil, err
		}
		c, err := canon.Transform(unsigned)
		if err != nil {
			return nil, fmt.Errorf("seq %d: the edited body is not JSON: %v", i, err)
		}
		r.Hash = canon.Digest(c)
		full, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		if out[i], err = canon.Transform(full); err != nil {
			return nil, err
		}
		prev = r.Hash
	}
	return out, nil
}
