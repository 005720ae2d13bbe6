package main

import (
	"fmt"

	"golang.org/x/mod/sumdb/note"

	"github.com/lineage-guard/lineage/checkpoint"
)

// checkpointSigner reads serve's --checkpoint-key; "" means no signer (the
// checkpoint routes answer no_checkpoint_key).
func checkpointSigner(path string) (note.Signer, error) {
	if path == "" {
		return nil, nil
	}
	skey, err := readKeyFile("--checkpoint-key", path)
	if err != nil {
		return nil, err
	}
	s, err := checkpoint.NewSigner(skey)
	if err != nil {
		return nil, fmt.Errorf("--checkpoint-key %s: %w", path, err)
	}
	return s, nil
}
