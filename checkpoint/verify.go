package checkpoint

import (
	"bytes"
	"encoding/base64"
	"fmt"

	"github.com/transparency-dev/merkle/proof"

	"github.com/lineage-guard/lineage"
)

// Result is the outcome of checking a log against a checkpoint.
type Result struct {
	// OK: the log is the checkpoint's log or an extension of it.
	OK    bool   `json:"ok"`
	Agent string `json:"agent"`
	// Records is the log's length; Size the checkpoint's.
	Records uint64 `json:"records"`
	Size    uint64 `json:"checkpoint_size"`
	// Seq is the first seq where the log diverges from the checkpoint; when the
	// checkpoint carries no record list (a bare note), a changed record can
	// only be placed somewhere in Seq..Upto (D82: what a bare note can name). Both unset when OK.
	Seq    *uint64 `json:"diverges_at,omitempty"`
	Upto   *uint64 `json:"diverges_by,omitempty"`
	Reason string  `json:"reason,omitempty"`
	// ListIgnored says why a record list that came with the checkpoint was not
	// used (it does not match the signed root).
	ListIgnored string `json:"list_ignored,omitempty"`
}

func (r *Result) diverge(seq, upto uint64, format string, a ...any) Result {
	r.OK, r.Seq, r.Upto, r.Reason = false, &seq, &upto, fmt.Sprintf(format, a...)
	return *r
}

// Verify checks a verified log (its records, chain already checked) against
// a checkpoint opened with Open, and names where the log diverges from it:
// another agent (seq 0), a changed record (a rewrite, a fork), a truncation
// (the first missing seq). hashes is the checkpoint's record list from
// Unbundle, or nil; a list that does not match the signed root is ignored,
// and ListIgnored says so.
//
// An intact prefix is proved by the merkle module's consistency verifier:
// the checkpoint's tree must be a prefix of the log's tree.
func Verify(recs []lineage.Record, c Checkpoint, hashes []string) Result {
	res := Result{OK: true, Agent: c.Agent, Records: uint64(len(recs)), Size: c.Size}
	agent, err := agentOf(recs)
	if err != nil {
		return res.diverge(0, 0, "%v", err)
	}
	if agent != c.Agent {
		return res.diverge(0, 0, "the checkpoint is of agent %s, the log of agent %s", c.Agent, agent)
	}
	t, err := recordsTree(recs)
	if err != nil {
		return res.diverge(0, res.Records, "%v", err)
	}
	if hashes != nil {
		if why := checkList(hashes, c); why != "" {
			res.ListIgnored = why
		} else {
			for i := range min(res.Records, c.Size) {
				if recs[i].Hash != hashes[i] {
					return res.diverge(i, i, "record %d is not the one the checkpoint signed (%s, checkpointed %s): the log was rewritten or forked from here", i, recs[i].Hash, hashes[i])
				}
			}
		}
	}
	if res.Records < c.Size {
		n := res.Records
		if hashes == nil || res.ListIgnored != "" {
			return res.diverge(0, n, "the log has %d records, the checkpoint %d: truncated at seq %d at the latest; without the checkpoint's record list the records before it cannot be checked", n, c.Size, n)
		}
		return res.diverge(n, n, "the log has %d records, the checkpoint %d: truncated, records %d..%d are missing", n, c.Size, n, c.Size-1)
	}
	rootN, err := t.root(res.Records)
	if err == nil {
		var cons [][]byte
		if cons, err = t.consistency(c.Size, res.Records); err == nil {
			err = proof.VerifyConsistency(hasher, c.Size, res.Records, cons, c.Root, rootN)
		}
	}
	if err != nil || recs[c.Size-1].Hash != c.Head {
		// With a matching record list this cannot happen (the list is the
		// signed tree); without one the change is somewhere in the checkpoint.
		return res.diverge(0, c.Size-1, "the log's first %d records do not match the checkpoint's root: a record at or before seq %d was changed (rewritten or forked); the checkpoint carries no record list to name it", c.Size, c.Size-1)
	}
	return res
}

// checkList says why a checkpoint's record list cannot be trusted, or "".
func checkList(hashes []string, c Checkpoint) string {
	if uint64(len(hashes)) != c.Size {
		return fmt.Sprintf("it has %d hashes, the checkpoint %d records", len(hashes), c.Size)
	}
	t, err := newTree(hashes)
	if err != nil {
		return err.Error()
	}
	root, err := t.root(t.size())
	if err != nil {
		return err.Error()
	}
	if !bytes.Equal(root, c.Root) || hashes[len(hashes)-1] != c.Head {
		return "its Merkle root is not the signed root"
	}
	return ""
}

// Proof is an RFC 6962 inclusion proof of one record in a log's tree of a
// given size: what a service serves at GET /v1/agents/{agent}/proof/{seq}.
// Hashes are base64, as in the checkpoint's root line.
type Proof struct {
	Agent      string   `json:"agent"`
	Seq        uint64   `json:"seq"`
	Size       uint64   `json:"tree_size"`
	RecordHash string   `json:"record_hash"`
	Root       string   `json:"root"`
	Hashes     []string `json:"hashes"`
}

// InclusionProof proves that record seq is in the tree of the log's first
// size records (size 0 means the whole log). Check it with Proof.Verify
// against a checkpoint of that size.
func InclusionProof(recs []lineage.Record, seq, size uint64) (Proof, error) {
	agent, err := agentOf(recs)
	if err != nil {
		return Proof{}, err
	}
	if size == 0 {
		size = uint64(len(recs))
	}
	if seq >= size || size > uint64(len(recs)) {
		return Proof{}, fmt.Errorf("%w: no record %d in a tree of %d of the log's %d records", ErrBadLog, seq, size, len(recs))
	}
	t, err := recordsTree(recs)
	if err != nil {
		return Proof{}, fmt.Errorf("%w: %v", ErrBadLog, err)
	}
	return t.prove(agent, seq, size, nil)
}

// InclusionProofOf is InclusionProof over a log given by its record hashes,
// in seq order, against the checkpoint c that a service signed of it: the
// first c.Size hashes must be the tree c signs (its root and its head), else
// ErrDiverged (the log was rewritten since c was signed). It proves record
// seq in the tree of size records (0: c.Size), at most c.Size. The caller
// checked the hashes' chain; nothing else of the records is read.
func InclusionProofOf(c Checkpoint, hashes []string, seq, size uint64) (Proof, error) {
	if c.Size == 0 {
		return Proof{}, fmt.Errorf("%w: a checkpoint of no records proves no record", ErrBadLog)
	}
	if uint64(len(hashes)) < c.Size {
		return Proof{}, fmt.Errorf("%w: the log has %d records, the checkpoint %d: truncated", ErrDiverged, len(hashes), c.Size)
	}
	t, err := newTree(hashes[:c.Size])
	if err != nil {
		return Proof{}, fmt.Errorf("%w: %v", ErrBadLog, err)
	}
	root, err := t.root(c.Size)
	if err != nil {
		return Proof{}, err
	}
	if !bytes.Equal(root, c.Root) || hashes[c.Size-1] != c.Head {
		return Proof{}, fmt.Errorf("%w: the log's first %d records do not have the signed root: a record at or before seq %d was changed", ErrDiverged, c.Size, c.Size-1)
	}
	if size == 0 {
		size = c.Size
	}
	if seq >= size || size > c.Size {
		return Proof{}, fmt.Errorf("%w: no record %d in a tree of %d of the checkpoint's %d records", ErrBadLog, seq, size, c.Size)
	}
	if size == c.Size {
		return t.prove(c.Agent, seq, size, root)
	}
	return t.prove(c.Agent, seq, size, nil)
}

// prove is the inclusion proof of leaf seq in the tree of size leaves, whose
// root is root (nil: computed).
func (t *tree) prove(agent string, seq, size uint64, root []byte) (Proof, error) {
	hs, err := t.inclusion(seq, size)
	if err != nil {
		return Proof{}, err
	}
	if root == nil {
		if root, err = t.root(size); err != nil {
			return Proof{}, err
		}
	}
	p := Proof{Agent: agent, Seq: seq, Size: size, RecordHash: t.recHashes[seq],
		Root: base64.StdEncoding.EncodeToString(root), Hashes: make([]string, len(hs))}
	for i, h := range hs {
		p.Hashes[i] = base64.StdEncoding.EncodeToString(h)
	}
	return p, nil
}

// Verify checks the proof against a checkpoint (of the same agent and size)
// with the merkle module's inclusion verifier.
func (p Proof) Verify(c Checkpoint) error {
	if p.Agent != c.Agent || p.Size != c.Size {
		return fmt.Errorf("the proof is for agent %s at size %d, the checkpoint for agent %s at size %d", p.Agent, p.Size, c.Agent, c.Size)
	}
	leaf, err := leafHash(p.RecordHash)
	if err != nil {
		return err
	}
	hs := make([][]byte, len(p.Hashes))
	for i, s := range p.Hashes {
		if hs[i], err = base64.StdEncoding.DecodeString(s); err != nil {
			return fmt.Errorf("proof hash %d is not base64: %v", i, err)
		}
	}
	return proof.VerifyInclusion(hasher, p.Seq, p.Size, leaf, hs, c.Root)
}

// ConsistencyProof proves that the log's tree of size1 records is a prefix of
// its tree of size2 records (RFC 6962 §2.1.2), for a witness that holds an
// older checkpoint.
func ConsistencyProof(recs []lineage.Record, size1, size2 uint64) ([][]byte, error) {
	t, err := recordsTree(recs)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadLog, err)
	}
	return t.consistency(size1, size2)
}
