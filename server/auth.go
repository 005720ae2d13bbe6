package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/internal/source"
	"github.com/lineage-guard/lineage/internal/strictjson"
)

// Role is the api's role (api.Role); an auth file's Entry names one. The
// names stay here for the callers that write auth entries.
type Role = api.Role

// The roles, as package api defines them.
const (
	RoleAdmin    = api.RoleAdmin
	RoleApprover = api.RoleApprover
	RoleAgent    = api.RoleAgent
)

// Entry is one admin or approver of an auth file: the SHA-256 of its token.
type Entry struct {
	Name        string `json:"name"`
	Role        Role   `json:"role"`
	TokenSHA256 string `json:"token_sha256"`
	Description string `json:"description,omitempty"`
}

// agentPrefix starts every agent token; other tokens never start with it.
const agentPrefix = "lga_"

// tokenPrefix starts the tokens NewToken makes.
const tokenPrefix = "lgt_"

// keySize is the size of the server key, and of the random part of a token.
const keySize = 32

// NewToken returns a fresh random bearer token for an auth file.
func NewToken() string {
	var b [keySize]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// TokenSHA256 is the digest an auth file keeps of a token.
func TokenSHA256(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// LoadAuth reads an auth file (JSON or YAML), validated by schema/auth.schema.json;
// its problems come back as a diag.List naming file:line:col and the JSON pointer.
func LoadAuth(file string) ([]Entry, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, diag.List{{Code: diag.CodeIO, Position: diag.Position{File: file}, Message: err.Error()}}
	}
	return ParseAuth(file, data)
}

// ParseAuth is LoadAuth of bytes.
func ParseAuth(file string, data []byte) ([]Entry, error) {
	doc, diags := source.Load(file, data)
	if len(diags) == 0 {
		diags = source.Validate(doc, "auth")
	}
	if len(diags) > 0 {
		return nil, diags
	}
	raw, err := json.Marshal(doc.Value)
	if err != nil {
		return nil, err
	}
	var f struct {
		Principals []Entry `json:"principals"`
	}
	if err := strictjson.Unmarshal(raw, &f, 0); err != nil {
		return nil, err
	}
	names, digests := map[string]bool{}, map[string]bool{}
	for i, e := range f.Principals {
		ptr := fmt.Sprintf("/principals/%d", i)
		switch {
		case strings.HasPrefix(e.Name, "agt_"):
			diags = append(diags, diag.Diagnostic{Code: diag.CodeSchema, Pointer: ptr + "/name", Position: doc.Pos(ptr + "/name"),
				Message: fmt.Sprintf("name %q has the form of an agent id (agt_…)", e.Name)})
		case names[e.Name]:
			diags = append(diags, diag.Diagnostic{Code: diag.CodeSchema, Pointer: ptr + "/name", Position: doc.Pos(ptr + "/name"),
				Message: fmt.Sprintf("name %q is listed twice", e.Name)})
		case digests[e.TokenSHA256]:
			diags = append(diags, diag.Diagnostic{Code: diag.CodeSchema, Pointer: ptr + "/token_sha256", Position: doc.Pos(ptr + "/token_sha256"),
				Message: "this token is given to two principals"})
		}
		names[e.Name], digests[e.TokenSHA256] = true, true
	}
	if len(diags) > 0 {
		return nil, diags
	}
	return f.Principals, nil
}

// LoadOrCreateSecret reads a secret file, or creates it (mode 0600) with
// make() if it does not exist. A file that others may read is refused.
func LoadOrCreateSecret(path string, make func() []byte) ([]byte, bool, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		info, err := os.Stat(path)
		if err != nil {
			return nil, false, err
		}
		if info.Mode().Perm()&0o077 != 0 {
			return nil, false, fmt.Errorf("%s is readable by others (mode %04o); make it 0600", path, info.Mode().Perm())
		}
		if len(strings.TrimSpace(string(b))) == 0 {
			return nil, false, fmt.Errorf("%s is empty", path)
		}
		return b, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	b = make()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, false, err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, false, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, false, err
	}
	return b, true, f.Close()
}

// NewKey returns a fresh server key, hex encoded.
func NewKey() []byte {
	var b [keySize]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return []byte(hex.EncodeToString(b[:]) + "\n")
}

// KeysFrom decodes a server key file's contents: a key ring, one key a
// line, hex, at least 16 bytes each. The first key makes new agent tokens;
// every key verifies them, so a key is rotated by adding a new first line and
// retired by removing its line later (docs/operations.md). Blank lines and
// lines starting with '#' are skipped: D331 (comments in the key ring).
func KeysFrom(b []byte) ([][]byte, error) {
	var keys [][]byte
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := hex.DecodeString(line)
		if err != nil || len(k) < 16 {
			return nil, fmt.Errorf("line %d: a server key must be at least 16 bytes, hex encoded (one key a line)", i+1)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("the server key file holds no key (one hex key a line)")
	}
	return keys, nil
}

// authority turns bearer tokens into principals.
type authority struct {
	entries []entry
	keys    [][]byte // keys[0] signs; every one verifies
}

type entry struct {
	digest [sha256.Size]byte
	p      api.Principal
}

func newAuthority(entries []Entry, key []byte) (*authority, error) {
	keys, err := KeysFrom(key)
	if err != nil {
		return nil, err
	}
	a := &authority{keys: keys}
	for _, e := range entries {
		d, err := hex.DecodeString(e.TokenSHA256)
		if err != nil || len(d) != sha256.Size || (e.Role != RoleAdmin && e.Role != RoleApprover) || e.Name == "" {
			return nil, fmt.Errorf("principal %q: bad entry", e.Name)
		}
		var en entry
		copy(en.digest[:], d)
		en.p = api.Principal{Name: e.Name, Role: e.Role}
		a.entries = append(a.entries, en)
	}
	return a, nil
}

// agentMAC binds a token to one agent id under a server key.
func agentMAC(key []byte, agent string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("lineage agent token v1\x00"))
	m.Write([]byte(agent))
	return m.Sum(nil)
}

// agentToken is the token of an agent: its id and the MAC of it under the
// first key of the ring, so any node holding that key checks it without a
// stored copy (D71: agent tokens are an HMAC, not a stored hash).
func (a *authority) agentToken(agent string) string {
	b := append([]byte(agent), agentMAC(a.keys[0], agent)...)
	return agentPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// has reports whether p is one of the admins and approvers.
func (a *authority) has(p api.Principal) bool {
	for _, e := range a.entries {
		if e.p == p {
			return true
		}
	}
	return false
}

// principal returns who the token stands for, or false.
func (a *authority) principal(token string) (api.Principal, bool) {
	if rest, ok := strings.CutPrefix(token, agentPrefix); ok {
		// Strict: one spelling per token (docs/service.md); the lenient decoder
		// lets the unused low bits of the last character take any value.
		b, err := base64.RawURLEncoding.Strict().DecodeString(rest)
		if err != nil || len(b) <= sha256.Size {
			return api.Principal{}, false
		}
		id, mac := string(b[:len(b)-sha256.Size]), b[len(b)-sha256.Size:]
		valid := false
		for _, k := range a.keys { // every key of the ring verifies
			valid = hmac.Equal(mac, agentMAC(k, id)) || valid
		}
		if !valid {
			return api.Principal{}, false
		}
		return api.Principal{Name: id, Role: api.RoleAgent, Agent: id}, true
	}
	sum := sha256.Sum256([]byte(token))
	var found api.Principal
	ok := 0
	for _, e := range a.entries { // every entry compared: the time says nothing
		if subtle.ConstantTimeCompare(sum[:], e.digest[:]) == 1 {
			found, ok = e.p, 1
		}
	}
	return found, ok == 1
}
