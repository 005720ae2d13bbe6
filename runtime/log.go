package runtime

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/internal/canon"
	"github.com/lineage-guard/lineage/internal/strictjson"
	"github.com/lineage-guard/lineage/policy"
)

// sealRecord computes the record's hash and its stored form: the canonical JSON
// (RFC 8785) of the whole record, hash included, on one line. The body is
// canonical JSON (see canonicalBody); the envelope around it is written by
// envelope, whose values need no canonicalization (see there).
//
// The line is the one allocation that outlives the call (the record's Body
// and Hash point into it or copy from it); the body and the unsigned record
// that the hash covers are written in pooled scratch space.
func sealRecord(seq uint64, at time.Time, it item, prev string) (lineage.Record, []byte, error) {
	sp := sealScratch.Get().(*[]byte)
	defer sealScratch.Put(sp)
	signed, bodyLen, t, hash, err := signRecord(sp, seq, at, it, prev)
	if err != nil {
		return lineage.Record{}, nil, err
	}
	// The stored line is the unsigned record with the hash member after the
	// body (RFC 8785 order: at, body, hash, kind, prev, seq).
	bodyAt := len(`{"at":"`) + len(lineage.TimeLayout) + len(`","body":`)
	bodyEnd := bodyAt + bodyLen
	line := make([]byte, 0, len(signed)+len(`,"hash":""`)+hashBytes)
	line = append(line, signed[:bodyEnd]...)
	line = append(append(append(line, `,"hash":"`...), hash[:]...), '"')
	line = append(line, signed[bodyEnd:]...)
	return lineage.Record{Seq: seq, At: t, Kind: it.kind, Prev: prev, Body: line[bodyAt : bodyAt+bodyLen : bodyAt+bodyLen],
		Hash: string(hash[:])}, line, nil
}

// hashRecord is sealRecord without the stored line, for an agent on no
// store (Scratch): the record (its Body nil) with its hash.
func hashRecord(seq uint64, at time.Time, it item, prev string) (lineage.Record, error) {
	sp := sealScratch.Get().(*[]byte)
	defer sealScratch.Put(sp)
	_, _, t, hash, err := signRecord(sp, seq, at, it, prev)
	if err != nil {
		return lineage.Record{}, err
	}
	return lineage.Record{Seq: seq, At: t, Kind: it.kind, Prev: prev, Hash: string(hash[:])}, nil
}

// signRecord writes a record's canonical body and the unsigned record that
// its hash covers into the scratch space *sp, and returns the unsigned record,
// the body's length, the record's time and its hash.
func signRecord(sp *[]byte, seq uint64, at time.Time, it item, prev string) (signed []byte, bodyLen int, t lineage.Time, hash [hashBytes]byte, err error) {
	body, direct := appendCanonicalBody((*sp)[:0], it)
	if !direct {
		if body, err = canonicalBody(it); err != nil {
			return nil, 0, t, hash, err
		}
	}
	t = lineage.Time{Time: at.UTC()}
	need := len(body) + envelopeBytes + len(prev) + 2*hashBytes
	scratch := *sp
	if cap(scratch) < len(body)+need {
		scratch = make([]byte, len(body), 2*(len(body)+need))
		copy(scratch, body)
		body = scratch
	}
	*sp = scratch[:0]
	signed = envelope(scratch[len(body):len(body)], seq, t, it.kind, prev, body, "")
	canon.AppendDigest(hash[:0], sha256.Sum256(signed))
	return signed, len(body), t, hash, nil
}

// envelopeBytes bounds a record's bytes outside its body, prev and hash.
const (
	envelopeBytes = 128
	hashBytes     = canon.DigestLen
)

var sealScratch = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// canonicalBody returns the RFC 8785 canonical JSON of a record's body.
func canonicalBody(it item) ([]byte, error) {
	if b, ok := it.body.(*lineage.ActionBody); ok && it.args == nil {
		// A body without the canonical args that travel with a request's item.
		raw, err := json.Marshal(argsOrEmpty(b.Request.Args))
		if err != nil {
			return nil, err
		}
		if it.args, err = canon.Transform(raw); err != nil {
			return nil, err
		}
	}
	if out, ok := appendCanonicalBody(make([]byte, 0, 256+len(it.args)), it); ok {
		return out, nil
	}
	raw, err := json.Marshal(it.body)
	if err != nil {
		return nil, err
	}
	return canon.Transform(raw)
}

// appendCanonicalBody writes the canonical JSON of the bodies that requests,
// approvals and kills write (action, approval, termination) directly, without
// reflection: members in RFC 8785 order (by name), integers only, strings as
// appendCanonicalString writes them, an action's args already canonical (it.args
// must be set). It reports false for any other body, which the JCS library
// encodes. TestCanonicalBodies holds it equal to the library.
func appendCanonicalBody(dst []byte, it item) ([]byte, bool) {
	switch b := it.body.(type) {
	case *lineage.ActionBody:
		dst = append(dst, `{"request":{"args":`...)
		dst = append(dst, it.args...)
		dst = append(dst, `,"id":`...)
		dst = appendCanonicalString(dst, b.Request.ID)
		dst = append(dst, `,"tool":`...)
		dst = appendCanonicalString(dst, b.Request.Tool)
		dst = append(dst, `},"verdict":`...)
		dst = appendCanonicalVerdict(dst, b.Verdict)
	case *lineage.ApprovalBody:
		dst = append(dst, `{"approved":`...)
		dst = strconv.AppendBool(dst, b.Approved)
		dst = append(dst, `,"approver":`...)
		dst = appendCanonicalString(dst, b.Approver)
		if b.Note != "" {
			dst = append(dst, `,"note":`...)
			dst = appendCanonicalString(dst, b.Note)
		}
		dst = append(dst, `,"request_id":`...)
		dst = appendCanonicalString(dst, b.RequestID)
		dst = append(dst, `,"verdict":`...)
		dst = appendCanonicalVerdict(dst, b.Verdict)
	case *lineage.TerminationBody:
		dst = append(dst, '{')
		if b.By != "" {
			dst = append(dst, `"by":`...)
			dst = append(appendCanonicalString(dst, b.By), ',')
		}
		if b.Note != "" {
			dst = append(dst, `"note":`...)
			dst = append(appendCanonicalString(dst, b.Note), ',')
		}
		dst = append(dst, `"reason":`...)
		dst = appendTermination(dst, b.Reason)
	default:
		return dst, false
	}
	return append(dst, '}'), true
}

func appendCanonicalVerdict(dst []byte, v lineage.Verdict) []byte {
	dst = append(dst, `{"cost":`...)
	dst = strconv.AppendInt(dst, v.Cost, 10)
	dst = append(dst, `,"decision":`...)
	dst = appendCanonicalString(dst, string(v.Decision))
	dst = append(dst, `,"reason":`...)
	dst = appendCanonicalString(dst, v.Reason)
	dst = append(dst, `,"request_id":`...)
	dst = appendCanonicalString(dst, v.RequestID)
	dst = append(dst, `,"scar":`...)
	if v.Scar == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, `{"severity":`...)
		dst = appendCanonicalString(dst, string(v.Scar.Severity))
		dst = append(dst, `,"weight":`...)
		dst = strconv.AppendInt(dst, v.Scar.Weight, 10)
		dst = append(dst, '}')
	}
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, v.Seq, 10)
	dst = append(dst, `,"terminated":`...)
	return append(appendTermination(dst, v.Terminated), '}')
}

// appendTermination writes a termination reason, null for none.
func appendTermination(dst []byte, t lineage.Termination) []byte {
	if t == "" {
		return append(dst, "null"...)
	}
	return appendCanonicalString(dst, string(t))
}

// appendCanonicalString writes s as a JSON string the way RFC 8785 does: the
// two-letter escapes for " \\ \b \f \n \r \t, \u00xx (lowercase) for the
// other control characters, every other character as itself (U+2028 too).
// A byte that is not valid UTF-8 becomes U+FFFD, as Go's JSON encoder makes it
// before the library sees it.
func appendCanonicalString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, s[start:i]...)
				dst = utf8.AppendRune(dst, utf8.RuneError)
				i++
				start = i
				continue
			}
			i += size
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	return append(append(dst, s[start:]...), '"')
}

// envelope appends a record's canonical JSON around its canonical body; with
// hash "" it is the unsigned form that the hash covers. RFC 8785 orders the
// members by key (at, body, hash, kind, prev, seq), and every envelope value is
// plain ASCII that JSON never escapes — a fixed-layout time, a kind name,
// "sha256:<hex>" or "", an integer below 2^53 — so writing them verbatim is their
// canonical form. Callers pass only values of those shapes; openRecordStrict
// checks stored lines against the library's own canonicalization.
func envelope(dst []byte, seq uint64, at lineage.Time, kind lineage.Kind, prev string, body []byte, hash string) []byte {
	dst = append(dst, `{"at":"`...)
	dst = lineage.AppendTime(dst, at.Time)
	dst = append(dst, `","body":`...)
	dst = append(dst, body...)
	if hash != "" {
		dst = append(dst, `,"hash":"`...)
		dst = append(dst, hash...)
		dst = append(dst, '"')
	}
	dst = append(dst, `,"kind":"`...)
	dst = append(dst, kind...)
	dst = append(dst, `","prev":"`...)
	dst = append(dst, prev...)
	dst = append(dst, `","seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	return append(dst, '}')
}

func hashText(b []byte) string { return canon.Digest(b) }

var hashPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func knownKind(k lineage.Kind) bool {
	switch k {
	case lineage.KindGenesis, lineage.KindPolicy, lineage.KindAction, lineage.KindApproval, lineage.KindTermination:
		return true
	}
	return false
}

// ChainError reports the first record of a log that fails verification.
type ChainError struct {
	Seq    uint64
	Reason string
}

func (e *ChainError) Error() string {
	return fmt.Sprintf("log damaged at seq %d: %s", e.Seq, e.Reason)
}

// Is makes a ChainError match lineage.ErrCorrupt.
func (e *ChainError) Is(target error) bool { return target == lineage.ErrCorrupt }

// openRecord parses and checks one stored line as record seq following prev:
// the seq and prev must be the expected ones, the hash must be that of the
// record's content, and the line must be exactly the record's canonical form.
// Any change to a byte (a flipped bit, a re-encoded number, a changed letter
// case) fails. This is the check replay does on every record.
func openRecord(line []byte, seq uint64, prev string) (lineage.Record, error) {
	var rec lineage.Record
	// The one strict reader: member names exactly, no unknown or duplicate one.
	if err := strictjson.Unmarshal(line, &rec, 0); err != nil {
		return rec, &ChainError{Seq: seq, Reason: "not a record: " + err.Error()}
	}
	switch {
	case rec.Seq != seq:
		return rec, &ChainError{Seq: seq, Reason: fmt.Sprintf("seq is %d, expected %d", rec.Seq, seq)}
	case rec.Prev != prev:
		return rec, &ChainError{Seq: seq, Reason: "prev does not match the previous record's hash"}
	case !knownKind(rec.Kind):
		return rec, &ChainError{Seq: seq, Reason: fmt.Sprintf("unknown record kind %q", rec.Kind)}
	case !hashPattern.MatchString(rec.Hash):
		return rec, &ChainError{Seq: seq, Reason: "hash is not sha256:<64 hex digits>"}
	}
	signed := envelope(make([]byte, 0, len(line)), rec.Seq, rec.At, rec.Kind, rec.Prev, rec.Body, "")
	if hashText(signed) != rec.Hash {
		return rec, &ChainError{Seq: seq, Reason: "hash does not match the record's content"}
	}
	if !bytes.Equal(envelope(signed[:0], rec.Seq, rec.At, rec.Kind, rec.Prev, rec.Body, rec.Hash), line) {
		return rec, &ChainError{Seq: seq, Reason: "record is not in canonical form"}
	}
	return rec, nil
}

// openRecordFast is openRecord for replay, without a JSON decoder: the
// canonical envelope has a fixed layout,
//
//	{"at":"<30>","body":<body>,"hash":"sha256:<64>","kind":"<kind>","prev":"<prev>","seq":<seq>}
//
// and seq and prev are known before the line is read, so everything but the
// body is checked by comparing bytes, and the hash is recomputed over the line
// itself with the hash member cut out. Anything unexpected falls back to
// openRecord, which explains the failure.
func openRecordFast(line []byte, seq uint64, prev string, scratch *[]byte) (lineage.Record, error) {
	const head, hashKey = `{"at":"`, `,"hash":"`
	const timeLen, hashLen = len(lineage.TimeLayout), len("sha256:") + 64
	bodyStart := len(head) + timeLen + len(`","body":`)
	var tail [160]byte
	suffix := append(append(append(tail[:0], `","prev":"`...), prev...), `","seq":`...)
	suffix = append(strconv.AppendUint(suffix, seq, 10), '}')
	if len(line) < bodyStart+len(suffix) || string(line[:len(head)]) != head ||
		string(line[len(head)+timeLen:bodyStart]) != `","body":` || !bytes.HasSuffix(line, suffix) {
		return openRecord(line, seq, prev)
	}
	rest := line[:len(line)-len(suffix)] // …,"hash":"H","kind":"K
	var kind lineage.Kind
	for i, k := range kindSuffixes {
		if bytes.HasSuffix(rest, k) {
			kind = recordKinds[i]
			rest = rest[:len(rest)-len(k)]
			break
		}
	}
	hashAt := len(rest) - hashLen
	if kind == "" || hashAt-len(hashKey) < bodyStart || string(rest[hashAt-len(hashKey):hashAt]) != hashKey ||
		string(rest[hashAt:hashAt+7]) != "sha256:" {
		return openRecord(line, seq, prev)
	}
	timeText := line[len(head) : len(head)+timeLen]
	at, err := time.Parse(lineage.TimeLayout, string(timeText))
	if err != nil {
		return openRecord(line, seq, prev)
	}
	t := lineage.Time{Time: at}
	var canonTime [timeLen]byte
	if !bytes.Equal(lineage.AppendTime(canonTime[:0], t.Time), timeText) {
		return openRecord(line, seq, prev)
	}
	// The unsigned record is the line without its hash member.
	bodyEnd := hashAt - len(hashKey)
	unsignedRec := append(append((*scratch)[:0], line[:bodyEnd]...), line[hashAt+hashLen+1:]...)
	*scratch = unsignedRec
	sum := sha256.Sum256(unsignedRec)
	var hexSum [2 * sha256.Size]byte
	hex.Encode(hexSum[:], sum[:])
	if !bytes.Equal(hexSum[:], rest[hashAt+7:]) { // lowercase hex, as written: any other text fails here
		return openRecord(line, seq, prev)
	}
	return lineage.Record{Seq: seq, At: t, Kind: kind, Prev: prev, Body: line[bodyStart:bodyEnd], Hash: string(rest[hashAt:])}, nil
}

// recordKinds and kindSuffixes serve openRecordFast: `","kind":"<kind>` for each kind.
var (
	recordKinds  = []lineage.Kind{lineage.KindAction, lineage.KindApproval, lineage.KindTermination, lineage.KindGenesis, lineage.KindPolicy}
	kindSuffixes = func() [][]byte {
		out := make([][]byte, len(recordKinds))
		for i, k := range recordKinds {
			out[i] = []byte(`","kind":"` + string(k))
		}
		return out
	}()
)

// bodyIsCanonical tells whether a record's body is exactly the canonical JSON
// of what it decodes to, so that replay accepts exactly what verify accepts
// (a body rewritten with a space or a duplicate key and rehashed is refused by
// both). An action body is re-encoded by the canonical writer, its args (if
// any) checked by the JCS library; the rarer kinds go to the library whole.
func bodyIsCanonical(rec lineage.Record, body any, canonArgs []byte) bool {
	if rec.Kind == lineage.KindAction {
		again, err := canonicalBody(item{kind: rec.Kind, body: body, args: canonArgs})
		if err != nil || !bytes.Equal(again, rec.Body) {
			return false
		}
		if string(canonArgs) == "{}" {
			return true
		}
		args, err := canon.Transform(canonArgs)
		return err == nil && bytes.Equal(args, canonArgs)
	}
	canon, err := canon.Transform(rec.Body)
	return err == nil && bytes.Equal(canon, rec.Body)
}

// openRecordStrict is openRecord (whose reader matches member names exactly)
// plus an independent check by the JCS library that the line is the canonical
// JSON of the record: what `verify` runs, so the auditor's tool trusts no shortcut of ours.
func openRecordStrict(line []byte, seq uint64, prev string) (lineage.Record, error) {
	rec, err := openRecord(line, seq, prev)
	if err != nil {
		return rec, err
	}
	canon, err := canon.Transform(line)
	if err != nil || !bytes.Equal(canon, line) {
		return rec, &ChainError{Seq: seq, Reason: "record is not in canonical form (RFC 8785)"}
	}
	return rec, nil
}

// VerifyLines checks a whole log given as its stored lines, in order, as
// VerifyLog does without a compiler (a policy that no longer compiles passes).
func VerifyLines(scan func(fn func(seq uint64, line []byte) error) error) ([]lineage.Record, error) {
	return VerifyLog(scan, nil)
}

// VerifyLog checks a whole log given as its stored lines, in order: every
// check that opening the log runs (docs/log.md: chain, canonical form, the order
// of kinds, bodies the fold accepts, times the runtime holds, the policy's
// digest against its document and, with compile, that the policy compiles to
// that digest), plus the JCS library's own check of each line. It returns the
// records, and a *ChainError naming the first bad seq if any.
func VerifyLog(scan func(fn func(seq uint64, line []byte) error) error, compile func(doc []byte) (*policy.Compiled, error)) ([]lineage.Record, error) {
	var (
		recs     []lineage.Record
		prevKind lineage.Kind
		f        = newFolded()
	)
	err := scan(func(seq uint64, line []byte) error {
		rec, err := openRecordStrict(line, seq, f.head)
		if err != nil {
			return err
		}
		if err := kindFollows(rec, seq, prevKind); err != nil {
			return err
		}
		if _, err := foldChecked(f, rec, compile); err != nil {
			return err
		}
		prevKind = rec.Kind
		recs = append(recs, rec)
		return nil
	})
	return recs, err
}

// foldChecked folds one opened record into f after the checks replay and
// verify share: the body decodes and is canonical, the time is one the
// runtime holds (D50: the times the guard holds), and a policy record's digest is that of its document
// and, when compile is given, of the document compiled again (D53: verify runs what open runs). It
// returns the compiled policy of a policy record.
func foldChecked(f *folded, rec lineage.Record, compile func(doc []byte) (*policy.Compiled, error)) (*policy.Compiled, error) {
	seq := rec.Seq
	if err := recordable(rec.At.Time); err != nil {
		return nil, &ChainError{Seq: seq, Reason: "record time " + rec.At.UTC().Format(time.RFC3339Nano) + " is outside the times the runtime holds"}
	}
	body, canonArgs, err := decodeBody(rec)
	if err != nil {
		return nil, &ChainError{Seq: seq, Reason: err.Error()}
	}
	if !bodyIsCanonical(rec, body, canonArgs) {
		return nil, &ChainError{Seq: seq, Reason: "record body is not in canonical form (RFC 8785)"}
	}
	var compiled *policy.Compiled
	if pb, ok := body.(*lineage.PolicyBody); ok {
		if got := hashText(pb.Policy); got != pb.Digest {
			return nil, &ChainError{Seq: seq, Reason: fmt.Sprintf("policy digest is %s but its document hashes to %s", pb.Digest, got)}
		}
		if compile != nil {
			c, err := compile(pb.Policy)
			if err != nil {
				return nil, &ChainError{Seq: seq, Reason: "the policy does not compile: " + err.Error()}
			}
			if c.Digest != pb.Digest {
				return nil, &ChainError{Seq: seq, Reason: fmt.Sprintf("policy digest is %s in the log but %s when compiled again", pb.Digest, c.Digest)}
			}
			compiled = c
		}
	}
	if err := f.fold(rec, body, canonArgs); err != nil {
		return nil, &ChainError{Seq: seq, Reason: err.Error()}
	}
	return compiled, nil
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
