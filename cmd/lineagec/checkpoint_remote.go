package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/lineage-guard/lineage/client"
)

// remoteCheckpoint is `checkpoint AGENT --server URL`: the server's signed
// note of the agent's log (GET /v1/agents/{agent}/checkpoint), byte for byte.
func remoteCheckpoint(c *client.Client, p checkpointParams, agent string, stdout io.Writer) error {
	if p.key != "" {
		return errors.New("--key is refused with a server: the server signs with its serve --checkpoint-key")
	}
	msg, err := c.Checkpoint(context.Background(), agent)
	if err != nil {
		return fmt.Errorf("%s: %w", agent, readable(err))
	}
	if p.out == "" {
		_, err = stdout.Write(msg)
		return err
	}
	return os.WriteFile(p.out, msg, 0o644)
}
