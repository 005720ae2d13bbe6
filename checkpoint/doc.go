// Package checkpoint owns provable history (docs/history.md): Ed25519 keys, signed
// checkpoints of an agent's log, and Merkle proofs over its records.
//
// A checkpoint is a C2SP signed note (golang.org/x/mod/sumdb/note) whose text
// is a C2SP tlog-checkpoint: the origin line "lineage/<agent>", the tree size
// (the number of records), the base64 RFC 6962 root of the Merkle tree whose
// leaves are the records' hashes, and one extension line "head <hash>". Roots
// and proofs are computed with github.com/transparency-dev/merkle (its
// rfc6962 hasher, compact ranges and proof node layout); they are checked by
// that module's verifiers, never by code of ours.
//
// The package reads records, never a store: callers (the CLI, the service)
// read and chain-verify a log with the runtime first. It decides nothing
// about verdicts, and it does not keep checkpoints: keeping them away from the
// machine that writes the logs is the point (docs/history.md).
package checkpoint
