package checkpoint

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"github.com/lineage-guard/lineage"
)

// Errors callers branch on with errors.Is.
var (
	// ErrBadKey: a key file is not a note signer (private) or verifier (public) key.
	ErrBadKey = errors.New("bad_key")
	// ErrWrongKey: the checkpoint is not signed by the given key (another key, or none).
	ErrWrongKey = errors.New("checkpoint_wrong_key")
	// ErrDamaged: the checkpoint is not a well-formed signed note, its signature does
	// not verify, or its text is not a lineage checkpoint.
	ErrDamaged = errors.New("checkpoint_damaged")
	// ErrBadLog: the records cannot be checkpointed (no genesis, a bad hash).
	ErrBadLog = errors.New("bad_log")
	// ErrDiverged: the records are not the tree a checkpoint signed (a
	// rewrite, a truncation).
	ErrDiverged = errors.New("checkpoint_diverged")
)

// OriginPrefix starts every checkpoint's origin line; the agent id follows.
const OriginPrefix = "lineage/"

// Checkpoint is what a signed checkpoint states about an agent's log: its
// first Size records have the Merkle root Root, and the last of them the hash Head.
type Checkpoint struct {
	Agent string
	Size  uint64
	Root  []byte // RFC 6962 root, 32 bytes
	Head  string // "sha256:<hex>" of record Size-1
}

// Origin is the checkpoint's origin line: "lineage/<agent>".
func (c Checkpoint) Origin() string { return OriginPrefix + c.Agent }

// Text is the note text (C2SP tlog-checkpoint): origin, size, base64 root,
// then the extension line "head <hash>".
func (c Checkpoint) Text() string {
	return fmt.Sprintf("%s\n%d\n%s\nhead %s\n", c.Origin(), c.Size, base64.StdEncoding.EncodeToString(c.Root), c.Head)
}

// Parse reads a checkpoint's note text (see Text).
func Parse(text string) (Checkpoint, error) {
	bad := func(format string, a ...any) (Checkpoint, error) {
		return Checkpoint{}, fmt.Errorf("%w: %s", ErrDamaged, fmt.Sprintf(format, a...))
	}
	lines := strings.Split(text, "\n")
	if len(lines) != 5 || lines[4] != "" {
		return bad("a checkpoint has 4 lines (origin, size, root, head), this one %d", len(lines)-1)
	}
	agent, ok := strings.CutPrefix(lines[0], OriginPrefix)
	if !ok || agent == "" {
		return bad("origin %q does not name a lineage agent (%s<agent>)", lines[0], OriginPrefix)
	}
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil || strconv.FormatUint(size, 10) != lines[1] || size == 0 {
		return bad("tree size %q is not a positive decimal number", lines[1])
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != 32 {
		return bad("root %q is not 32 bytes in base64", lines[2])
	}
	head, ok := strings.CutPrefix(lines[3], "head ")
	if _, herr := recordLeaf(head); !ok || herr != nil {
		return bad("extension line %q is not \"head sha256:<hex>\"", lines[3])
	}
	return Checkpoint{Agent: agent, Size: size, Root: root, Head: head}, nil
}

// New makes the checkpoint of a whole log. The records must be a verified
// log (the runtime's Records or VerifyLines): New trusts their chain.
func New(recs []lineage.Record) (Checkpoint, error) {
	agent, err := agentOf(recs)
	if err != nil {
		return Checkpoint{}, err
	}
	t, err := recordsTree(recs)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %v", ErrBadLog, err)
	}
	root, err := t.root(t.size())
	if err != nil {
		return Checkpoint{}, err
	}
	return Checkpoint{Agent: agent, Size: t.size(), Root: root, Head: recs[len(recs)-1].Hash}, nil
}

// agentOf reads the agent id from a log's genesis record.
func agentOf(recs []lineage.Record) (string, error) {
	if len(recs) == 0 || recs[0].Kind != lineage.KindGenesis {
		return "", fmt.Errorf("%w: the log does not start with a genesis record", ErrBadLog)
	}
	var g lineage.GenesisBody
	if err := json.Unmarshal(recs[0].Body, &g); err != nil || g.Agent == "" {
		return "", fmt.Errorf("%w: the genesis record names no agent", ErrBadLog)
	}
	return g.Agent, nil
}

// GenerateKey makes an Ed25519 key pair named name, as note keys:
// skey "PRIVATE+KEY+<name>+<hash>+<key>" and vkey "<name>+<hash>+<key>".
func GenerateKey(name string) (skey, vkey string, err error) {
	skey, vkey, err = note.GenerateKey(rand.Reader, name)
	if err == nil {
		_, err = note.NewSigner(skey) // GenerateKey does not check the name
	}
	if err != nil {
		return "", "", fmt.Errorf("%w: key name %q: %v (a name has no spaces or '+')", ErrBadKey, name, err)
	}
	return skey, vkey, nil
}

// NewSigner reads a private key (the text GenerateKey returns; surrounding
// white space is ignored).
func NewSigner(skey string) (note.Signer, error) {
	s, err := note.NewSigner(strings.TrimSpace(skey))
	if err != nil {
		return nil, fmt.Errorf("%w: not a private signing key (PRIVATE+KEY+name+hash+key): %v", ErrBadKey, err)
	}
	return s, nil
}

// NewVerifier reads a public key (the vkey GenerateKey returns).
func NewVerifier(vkey string) (note.Verifier, error) {
	v, err := note.NewVerifier(strings.TrimSpace(vkey))
	if err != nil {
		return nil, fmt.Errorf("%w: not a public verifier key (name+hash+key): %v", ErrBadKey, err)
	}
	return v, nil
}

// Sign signs a checkpoint: the bytes are a C2SP signed note.
func Sign(c Checkpoint, s note.Signer) ([]byte, error) {
	return note.Sign(&note.Note{Text: c.Text()}, s)
}

// SignRecords makes and signs the checkpoint of a whole log: what a service
// serves at GET /v1/agents/{agent}/checkpoint.
func SignRecords(recs []lineage.Record, s note.Signer) ([]byte, error) {
	c, err := New(recs)
	if err != nil {
		return nil, err
	}
	return Sign(c, s)
}

// Open checks a signed note against a verifier key and parses its checkpoint.
// A note signed only by other keys is ErrWrongKey; anything else wrong with it
// (its form, a signature by this key that does not verify, a text that is not
// a checkpoint) is ErrDamaged.
func Open(msg []byte, v note.Verifier) (Checkpoint, error) {
	n, err := note.Open(msg, note.VerifierList(v))
	var unverified *note.UnverifiedNoteError
	var invalid *note.InvalidSignatureError
	switch {
	case errors.As(err, &unverified):
		var names []string
		for _, s := range unverified.Note.UnverifiedSigs {
			names = append(names, fmt.Sprintf("%s+%08x", s.Name, s.Hash))
		}
		return Checkpoint{}, fmt.Errorf("%w: signed by %s, not by %s+%08x", ErrWrongKey, strings.Join(names, ", "), v.Name(), v.KeyHash())
	case errors.As(err, &invalid):
		return Checkpoint{}, fmt.Errorf("%w: the signature of %s+%08x does not match the text (the note was changed after signing)", ErrDamaged, invalid.Name, invalid.Hash)
	case err != nil:
		return Checkpoint{}, fmt.Errorf("%w: not a signed note: %v", ErrDamaged, err)
	}
	return Parse(n.Text)
}

// Bundle is what `lineagec checkpoint` writes: the signed note, a blank line,
// and the hashes of the records the checkpoint covers, one a line (D81: the checkpoint file carries the record list). The
// list is not signed: it is checked against the signed root, and lets verify
// name the first record that changed.
func Bundle(signed []byte, recs []lineage.Record) []byte {
	var b bytes.Buffer
	b.Write(signed)
	b.WriteByte('\n')
	for _, r := range recs {
		b.WriteString(r.Hash)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Unbundle splits a checkpoint file into the signed note and its record list
// (nil when the file is the note alone).
func Unbundle(file []byte) (signed []byte, hashes []string, err error) {
	end := bytes.Index(file, []byte("\n\n"))
	if end < 0 {
		return nil, nil, fmt.Errorf("%w: no blank line between the text and the signatures", ErrDamaged)
	}
	i := end + 2
	for i < len(file) && bytes.HasPrefix(file[i:], []byte("— ")) {
		nl := bytes.IndexByte(file[i:], '\n')
		if nl < 0 {
			return nil, nil, fmt.Errorf("%w: the last signature line has no newline", ErrDamaged)
		}
		i += nl + 1
	}
	signed, rest := file[:i], file[i:]
	if len(rest) == 0 {
		return signed, nil, nil
	}
	body, ok := bytes.CutPrefix(rest, []byte("\n"))
	if !ok || len(body) == 0 || body[len(body)-1] != '\n' {
		return nil, nil, fmt.Errorf("%w: unexpected text after the signatures", ErrDamaged)
	}
	hashes = strings.Split(string(body[:len(body)-1]), "\n")
	return signed, hashes, nil
}
