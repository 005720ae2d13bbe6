package canon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Prefix starts every digest the project writes: "sha256:" and 64 lowercase
// hex digits (a record's hash, a policy's digest, a tool's pin).
const Prefix = "sha256:"

// DigestLen is the length of a digest.
const DigestLen = len(Prefix) + 2*sha256.Size

// Digest is Prefix and the hex SHA-256 of b, which must already be canonical
// (Transform's output, or bytes written canonically by their owner).
func Digest(b []byte) string {
	var out [DigestLen]byte
	return string(AppendDigest(out[:0], sha256.Sum256(b)))
}

// AppendDigest appends Prefix and the hex of sum to dst, for callers that
// keep digests in buffers they own (the log writes one per record).
func AppendDigest(dst []byte, sum [sha256.Size]byte) []byte {
	dst = append(dst, Prefix...)
	n := len(dst)
	dst = append(dst, make([]byte, 2*sha256.Size)...)
	hex.Encode(dst[n:], sum[:])
	return dst
}

// DigestOf is the digest of v's canonical JSON (RFC 8785).
func DigestOf(v any) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	b, err := Transform(raw)
	if err != nil {
		return "", err
	}
	return Digest(b), nil
}
