package store

import (
	"bytes"
	"io"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// indexChangeFast is IndexChangeOf for the records a decision appends
// (action, approval, termination), read by a validating tokenizer in one
// pass over the record and one over its body, without reflection, by D410 (the index reads a decision's records in one tokenizer pass)
// (the index reads a decision's records in one tokenizer pass): it runs on
// every append, and with encoding/json it cost as much as OPA's evaluation
// of the decision.
//
// It answers (ok) only where encoding/json, IndexChangeOf's definition, reads
// the record alike and without error: the record is valid JSON with valid
// UTF-8 and nothing after it, and each member it reads (kind, at, body; an
// action's request.id, .tool, .args and verdict.decision; an approval's
// request_id) appears at most once, is named exactly as IndexChangeOf's
// structs name it (encoding/json would also take another letter case or an
// escaped name), and has the JSON type those structs hold (a string, an
// object; args any value). Anything else, genesis and policy records too,
// returns ok false and goes to encoding/json, which gives the error the
// index records. TestIndexChangeFast holds the two equal.
func indexChangeFast(agent string, seq uint64, rec []byte) (ch IndexChange, ok bool) {
	r := fastReaders.Get().(*fastReader)
	defer fastReaders.Put(r)
	var top [3]jsontext.Value // kind, at, body
	if !r.object(rec, topMembers, top[:]) || top[0] == nil {
		return ch, false
	}
	var kindBuf [16]byte
	kind, ok := unquoteInto(kindBuf[:0], top[0])
	if !ok {
		return ch, false
	}
	switch string(kind) {
	case "termination": // its body is not read (only valid JSON)
		ch.Terminated = true
		return ch, true
	case "action":
		var body [2]jsontext.Value
		var request [3]jsontext.Value
		var verdict [1]jsontext.Value
		if top[2] == nil || !r.object(top[2], actionMembers, body[:]) ||
			body[0] == nil || body[1] == nil || // null or absent: encoding/json reads them alike, this does not
			!r.object(body[0], requestMembers, request[:]) || !r.object(body[1], verdictMembers, verdict[:]) {
			return ch, false
		}
		var decisionBuf [16]byte
		decision, ok := unquoteInto(decisionBuf[:0], verdict[0])
		if !ok {
			return ch, false
		}
		if string(decision) == "pending" { // the other strings only need to be strings, which object checked
			at, ok1 := unquote(top[1])
			id, ok2 := unquote(request[0])
			tool, ok3 := unquote(request[1])
			if !ok1 || !ok2 || !ok3 {
				return ch, false
			}
			ch.AddPending = pendingRow(agent, seq, at, id, tool, request[2])
		}
		return ch, true
	case "approval":
		var body [1]jsontext.Value
		if top[2] == nil || !r.object(top[2], approvalMembers, body[:]) {
			return ch, false
		}
		id, ok := unquote(body[0])
		if !ok {
			return ch, false
		}
		ch.RemovePending = id
		return ch, true
	}
	return ch, false
}

// The members indexChangeFast reads, by object: the record, an action's
// body, its request (id, tool, args) and verdict, an approval's body. A
// member whose value must be an object or a string says so by its kind.
var (
	topMembers      = []member{{"kind", '"'}, {"at", '"'}, {"body", 0}}
	actionMembers   = []member{{"request", '{'}, {"verdict", '{'}}
	requestMembers  = []member{{"id", '"'}, {"tool", '"'}, {"args", 0}}
	verdictMembers  = []member{{"decision", '"'}}
	approvalMembers = []member{{"request_id", '"'}}
)

// member is a member's name and the kind its value must have (0: any).
type member struct {
	name string
	kind jsontext.Kind
}

// fastReader is a tokenizer with a buffer that aliases the text it reads.
type fastReader struct {
	buf bytes.Buffer
	dec *jsontext.Decoder
}

// allowDuplicateNames: the tokenizer leaves duplicates to object, which
// refuses those of the members it reads.
var allowDuplicateNames = jsontext.AllowDuplicateNames(true)

var fastReaders = sync.Pool{New: func() any {
	r := &fastReader{}
	r.dec = jsontext.NewDecoder(&r.buf)
	return r
}}

// object reads text, which must be one JSON object (nothing but whitespace
// after it), and sets vals[i] to the raw value of members[i] (it aliases
// text); a member absent stays nil. It reports false for text that is not valid JSON,
// for a member of members present twice, named with an escape or in another
// letter case, or of another kind than its member says, and for any other
// object member whose name could be one of members. Duplicate names are
// allowed elsewhere, as encoding/json allows them.
func (r *fastReader) object(text []byte, members []member, vals []jsontext.Value) bool {
	r.buf = *bytes.NewBuffer(text)
	d := r.dec
	d.Reset(&r.buf, allowDuplicateNames)
	if d.PeekKind() != '{' {
		return false
	}
	if _, err := d.ReadToken(); err != nil {
		return false
	}
	for d.PeekKind() == '"' {
		name, err := d.ReadValue()
		if err != nil {
			return false
		}
		if bytes.IndexByte(name, '\\') >= 0 {
			return false
		}
		i := -1
		unq := name[1 : len(name)-1]
		for j, m := range members {
			if string(unq) == m.name {
				i = j
				break
			}
			if bytes.EqualFold(unq, []byte(m.name)) {
				return false // encoding/json would read it as m
			}
		}
		if i < 0 {
			if d.SkipValue() != nil {
				return false
			}
			continue
		}
		if vals[i] != nil || (members[i].kind != 0 && d.PeekKind() != members[i].kind) {
			return false
		}
		v, err := d.ReadValue()
		if err != nil {
			return false
		}
		vals[i] = v
	}
	if _, err := d.ReadToken(); err != nil { // the '}'
		return false
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return false
	}
	return true
}

// unquoteInto appends the value of the JSON string v (valid: the tokenizer
// read it) to dst; an absent member (nil) is "".
func unquoteInto(dst []byte, v jsontext.Value) ([]byte, bool) {
	switch {
	case v == nil:
		return dst, true
	case len(v) < 2 || v[0] != '"':
		return nil, false
	case bytes.IndexByte(v, '\\') < 0:
		return append(dst, v[1:len(v)-1]...), true
	}
	out, err := jsontext.AppendUnquote(dst, v)
	return out, err == nil
}

// unquote is unquoteInto as a string.
func unquote(v jsontext.Value) (string, bool) {
	if v == nil {
		return "", true
	}
	var buf [64]byte
	s, ok := unquoteInto(buf[:0], v)
	return string(s), ok
}
