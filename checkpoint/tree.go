package checkpoint

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/lineage-guard/lineage"
)

// hasher is RFC 6962's SHA-256 tree hasher (leaf prefix 0x00, node prefix 0x01).
var hasher = rfc6962.DefaultHasher

var factory = &compact.RangeFactory{Hash: hasher.HashChildren}

// tree is the Merkle tree of a log: its leaves are the RFC 6962 leaf hashes
// of the records' hashes (the 32 bytes of each "sha256:<hex>", D80 (what a checkpoint signs)).
//
// Roots and proof nodes come from the merkle module's compact ranges: a
// perfect subtree's hash is the single hash of the compact range over its
// leaves, and proof.Inclusion / proof.Consistency say which subtrees a proof
// needs (their coverages are disjoint, so a proof costs one pass over the
// leaves at most). The module's own tree builder lives in its testonly
// package, which is for tests; nothing else in it is needed.
type tree struct {
	leaves    [][]byte
	recHashes []string // the records' hashes the leaves are of
}

// recordLeaf is the leaf input of a record: its hash's 32 bytes.
func recordLeaf(hash string) ([]byte, error) {
	h, ok := strings.CutPrefix(hash, "sha256:")
	b, err := hex.DecodeString(h)
	if !ok || err != nil || len(b) != 32 {
		return nil, fmt.Errorf("record hash %q is not sha256:<64 hex digits>", hash)
	}
	return b, nil
}

// leafHash is the RFC 6962 leaf hash of a record hash.
func leafHash(hash string) ([]byte, error) {
	b, err := recordLeaf(hash)
	if err != nil {
		return nil, err
	}
	return hasher.HashLeaf(b), nil
}

func newTree(hashes []string) (*tree, error) {
	t := &tree{leaves: make([][]byte, len(hashes)), recHashes: hashes}
	for i, h := range hashes {
		l, err := leafHash(h)
		if err != nil {
			return nil, fmt.Errorf("seq %d: %w", i, err)
		}
		t.leaves[i] = l
	}
	return t, nil
}

func recordsTree(recs []lineage.Record) (*tree, error) {
	hashes := make([]string, len(recs))
	for i, r := range recs {
		hashes[i] = r.Hash
	}
	return newTree(hashes)
}

func (t *tree) size() uint64 { return uint64(len(t.leaves)) }

// root is the RFC 6962 root of the first size leaves.
func (t *tree) root(size uint64) ([]byte, error) {
	if size > t.size() {
		return nil, fmt.Errorf("tree size %d is more than the log's %d records", size, t.size())
	}
	if size == 0 {
		return hasher.EmptyRoot(), nil
	}
	r := factory.NewEmptyRange(0)
	for _, l := range t.leaves[:size] {
		if err := r.Append(l, nil); err != nil {
			return nil, err
		}
	}
	return r.GetRootHash(nil)
}

// node is the hash of a perfect subtree.
func (t *tree) node(id compact.NodeID) ([]byte, error) {
	begin, end := id.Coverage()
	if end > t.size() {
		return nil, fmt.Errorf("node %d/%d lies beyond the log's %d records", id.Level, id.Index, t.size())
	}
	r := factory.NewEmptyRange(begin)
	for _, l := range t.leaves[begin:end] {
		if err := r.Append(l, nil); err != nil {
			return nil, err
		}
	}
	if h := r.Hashes(); len(h) == 1 {
		return h[0], nil
	}
	return nil, fmt.Errorf("node %d/%d is not a perfect subtree", id.Level, id.Index)
}

// hashes fills a proof's node list and folds its ephemeral node.
func (t *tree) hashes(n proof.Nodes) ([][]byte, error) {
	hs := make([][]byte, len(n.IDs))
	for i, id := range n.IDs {
		h, err := t.node(id)
		if err != nil {
			return nil, err
		}
		hs[i] = h
	}
	return n.Rehash(hs, hasher.HashChildren)
}

func (t *tree) inclusion(index, size uint64) ([][]byte, error) {
	if size > t.size() {
		return nil, fmt.Errorf("tree size %d is more than the log's %d records", size, t.size())
	}
	n, err := proof.Inclusion(index, size)
	if err != nil {
		return nil, err
	}
	return t.hashes(n)
}

func (t *tree) consistency(size1, size2 uint64) ([][]byte, error) {
	if size2 > t.size() {
		return nil, fmt.Errorf("tree size %d is more than the log's %d records", size2, t.size())
	}
	n, err := proof.Consistency(size1, size2)
	if err != nil {
		return nil, err
	}
	return t.hashes(n)
}
