package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/lineage-guard/lineage/checkpoint"
)

// maxNote bounds a checkpoint answer: a note is a few hundred bytes, a few
// cosignatures add a line each.
const maxNote = 64 << 10

// Checkpoint returns the service's signed checkpoint of an agent's log
// (docs/history.md), the C2SP signed note byte for byte: check it with checkpoint.Open and
// the service's public key, and keep it away from the service. A service
// without a checkpoint key answers the code no_checkpoint_key.
func (c *Client) Checkpoint(ctx context.Context, agent string) ([]byte, error) {
	path := "/v1/agents/" + seg(agent) + "/checkpoint"
	resp, err := c.do(ctx, "GET", path, nil, nil, true)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, readError(resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxNote+1))
	if err != nil {
		return nil, fmt.Errorf("client: GET %s: %w", path, err)
	}
	if len(b) > maxNote {
		return nil, fmt.Errorf("client: GET %s: the checkpoint is over %d bytes", path, maxNote)
	}
	return b, nil
}

// Proof returns the inclusion proof of record seq in the whole log as it is
// now; check it with Proof.Verify against a checkpoint of its size.
func (c *Client) Proof(ctx context.Context, agent string, seq uint64) (checkpoint.Proof, error) {
	return c.ProofAt(ctx, agent, seq, 0)
}

// ProofAt returns the inclusion proof of record seq in the tree of the log's
// first size records (0: the whole log): the size of a checkpoint the caller
// holds. A seq or size beyond the log is the code unknown_record.
func (c *Client) ProofAt(ctx context.Context, agent string, seq, size uint64) (checkpoint.Proof, error) {
	var q url.Values
	if size > 0 {
		q = url.Values{"size": {strconv.FormatUint(size, 10)}}
	}
	var out checkpoint.Proof
	err := c.call(ctx, "GET", "/v1/agents/"+seg(agent)+"/proof/"+strconv.FormatUint(seq, 10), q, nil, &out, http.StatusOK, true)
	return out, err
}
