package checkpoint

import (
	"fmt"

	"github.com/transparency-dev/merkle/compact"

	"github.com/lineage-guard/lineage"
)

// Growing keeps the checkpoint of one agent's log as records are appended,
// in O(log n) space (a compact range of the merkle module): for a service
// that signs checkpoints as logs grow without reading each log again.
// It is not safe for concurrent use.
type Growing struct {
	agent string
	r     *compact.Range
	head  string
}

// NewGrowing starts an empty log of agent; Append its records from seq 0.
func NewGrowing(agent string) *Growing {
	return &Growing{agent: agent, r: factory.NewEmptyRange(0)}
}

// Append adds the log's next record (seq must be the number appended so far).
func (g *Growing) Append(rec lineage.Record) error {
	if rec.Seq != g.r.End() {
		return fmt.Errorf("%w: record %d appended to a checkpoint of %d records", ErrBadLog, rec.Seq, g.r.End())
	}
	l, err := leafHash(rec.Hash)
	if err != nil {
		return fmt.Errorf("%w: seq %d: %v", ErrBadLog, rec.Seq, err)
	}
	if err := g.r.Append(l, nil); err != nil {
		return err
	}
	g.head = rec.Hash
	return nil
}

// Checkpoint is the checkpoint of the records appended so far.
func (g *Growing) Checkpoint() (Checkpoint, error) {
	if g.r.End() == 0 {
		return Checkpoint{}, fmt.Errorf("%w: no records yet", ErrBadLog)
	}
	root, err := g.r.GetRootHash(nil)
	if err != nil {
		return Checkpoint{}, err
	}
	return Checkpoint{Agent: g.agent, Size: g.r.End(), Root: root, Head: g.head}, nil
}
