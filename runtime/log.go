package runtime

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/lineage-guard/lineage"
)

// unsigned is a record without its hash: what the hash covers (SPEC §1).
type unsigned struct {
	Seq  uint64          `json:"seq"`
	At   lineage.Time    `json:"at"`
	Kind lineage.Kind    `json:"kind"`
	Prev string          `json:"prev"`
	Body json.RawMessage `json:"body"`
}

// sealRecord computes the record's hash and its stored form: the canonical JSON
// (RFC 8785) of the whole record, hash included, on one line. The body is
// canonical JSON (see canonicalBody); the envelope around it is written by
// envelope, whose values need no canonicalization (see there).
func sealRecord(seq uint64, at time.Time, it item, prev string) (lineage.Record, []byte, error) {
	canonBody, err := canonicalBody(it)
	if err != nil {
		return lineage.Record{}, nil, err
	}
	t := lineage.Time{Time: at.UTC()}
	buf := make([]byte, 0, 2*len(canonBody)+320)
	signed := envelope(buf, seq, t, it.kind, prev, canonBody, "")
	hash := hashText(signed)
	line := envelope(signed[len(signed):], seq, t, it.kind, prev, canonBody, hash)
	return lineage.Record{Seq: seq, At: t, Kind: it.kind, Prev: prev, Body: canonBody, Hash: hash}, line, nil
}

// The bodies of the records every decision writes, as encoding/json writes
// them canonically: fields in RFC 8785 order (by name), only int numbers, args
// already canonical (from the request check), no HTML escaping. The one
// difference left between encoding/json and RFC 8785 for such values is that
// Go escapes U+2028 and U+2029 in strings; canonicalBody hands any body with
// those to the JCS library. TestCanonicalBodies holds the two equal.
type (
	actionWire struct {
		Request requestWire `json:"request"`
		Verdict verdictWire `json:"verdict"`
	}
	requestWire struct {
		Args json.RawMessage `json:"args"`
		ID   string          `json:"id"`
		Tool string          `json:"tool"`
	}
	verdictWire struct {
		Cost       int64               `json:"cost"`
		Decision   lineage.Decision    `json:"decision"`
		Reason     string              `json:"reason"`
		RequestID  string              `json:"request_id"`
		Scar       *scarWire           `json:"scar"`
		Seq        uint64              `json:"seq"`
		Terminated lineage.Termination `json:"terminated"`
	}
	scarWire struct {
		Severity lineage.Severity `json:"severity"`
		Weight   int64            `json:"weight"`
	}
	approvalWire struct {
		Approved  bool        `json:"approved"`
		Approver  string      `json:"approver"`
		RequestID string      `json:"request_id"`
		Verdict   verdictWire `json:"verdict"`
	}
	terminationWire struct {
		By     string              `json:"by,omitempty"`
		Note   string              `json:"note,omitempty"`
		Reason lineage.Termination `json:"reason"`
	}
)

func wireVerdict(v lineage.Verdict) verdictWire {
	w := verdictWire{Cost: v.Cost, Decision: v.Decision, Reason: v.Reason, RequestID: v.RequestID,
		Seq: v.Seq, Terminated: v.Terminated}
	if v.Scar != nil {
		w.Scar = &scarWire{Severity: v.Scar.Severity, Weight: v.Scar.Weight}
	}
	return w
}

// canonicalBody returns the RFC 8785 canonical JSON of a record's body.
func canonicalBody(it item) ([]byte, error) {
	var (
		wire       any
		useLibrary bool // a part may not be canonical yet
	)
	switch b := it.body.(type) {
	case *lineage.ActionBody:
		args := it.args
		if args == nil { // the canonical args travel with the item; a body alone is marshaled
			var err error
			if args, err = json.Marshal(argsOrEmpty(b.Request.Args)); err != nil {
				return nil, err
			}
			useLibrary = true
		}
		wire = actionWire{Request: requestWire{Args: args, ID: b.Request.ID, Tool: b.Request.Tool},
			Verdict: wireVerdict(b.Verdict)}
	case *lineage.ApprovalBody:
		wire = approvalWire{Approved: b.Approved, Approver: b.Approver, RequestID: b.RequestID, Verdict: wireVerdict(b.Verdict)}
	case *lineage.TerminationBody:
		wire = terminationWire{By: b.By, Note: b.Note, Reason: b.Reason}
	default:
		raw, err := json.Marshal(it.body)
		if err != nil {
			return nil, err
		}
		return jcs.Transform(raw)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(wire); err != nil {
		return nil, err
	}
	out := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if useLibrary || bytes.Contains(out, []byte(`\u2028`)) || bytes.Contains(out, []byte(`\u2029`)) {
		return jcs.Transform(out) // the library settles what encoding/json may write differently
	}
	return out, nil
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
	dst = at.UTC().AppendFormat(dst, lineage.TimeLayout)
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

func hashText(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

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
	if err := json.Unmarshal(line, &rec); err != nil {
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
	if !bytes.Equal(t.UTC().AppendFormat(canonTime[:0], lineage.TimeLayout), timeText) {
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
		args, err := jcs.Transform(canonArgs)
		return err == nil && bytes.Equal(args, canonArgs)
	}
	canon, err := jcs.Transform(rec.Body)
	return err == nil && bytes.Equal(canon, rec.Body)
}

// openRecordStrict is openRecord plus an independent check by the JCS library
// that the line is the canonical JSON of the record, field names matched
// exactly: what `verify` runs, so the auditor's tool trusts no shortcut of ours.
func openRecordStrict(line []byte, seq uint64, prev string) (lineage.Record, error) {
	rec, err := openRecord(line, seq, prev)
	if err != nil {
		return rec, err
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var strict lineage.Record
	if err := dec.Decode(&strict); err != nil {
		return rec, &ChainError{Seq: seq, Reason: "not a record: " + err.Error()}
	}
	canon, err := jcs.Transform(line)
	if err != nil || !bytes.Equal(canon, line) {
		return rec, &ChainError{Seq: seq, Reason: "record is not in canonical form (RFC 8785)"}
	}
	return rec, nil
}

// VerifyLines checks a whole log given as its stored lines, in order. It returns
// the records, and a *ChainError naming the first bad seq if any.
func VerifyLines(scan func(fn func(seq uint64, line []byte) error) error) ([]lineage.Record, error) {
	var (
		recs     []lineage.Record
		prev     string
		prevKind lineage.Kind
	)
	err := scan(func(seq uint64, line []byte) error {
		rec, err := openRecordStrict(line, seq, prev)
		if err != nil {
			return err
		}
		if err := kindFollows(rec, seq, prevKind); err != nil {
			return err
		}
		prevKind = rec.Kind
		prev = rec.Hash
		recs = append(recs, rec)
		return nil
	})
	return recs, err
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
