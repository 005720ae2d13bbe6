package store

import (
	"bytes"
	"io"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// indexChangeFast is IndexChangeOf for the records a decision appends
// (action, approval, termination), read by a validating tokenizer in one
// pass over the record, without reflection, by D410 (the index reads a
// decision's records in one tokenizer pass): it runs on every append, and
// with encoding/json it cost as much as OPA's evaluation of the decision. The
// tokenizer descends into the body, its request and its verdict as it meets
// them, so each byte is read once.
//
// It answers (ok) only where encoding/json, IndexChangeOf's definition, reads
// the record alike and without error: the record is valid JSON with valid
// UTF-8 and nothing after it, and each member it reads (kind, at, body; a
// body's request, verdict and request_id; a request's id, tool and args; a
// verdict's decision) appears at most once in its object, is named exactly as
// IndexChangeOf's structs name it (encoding/json would also take another
// letter case or an escaped name), and has the JSON type those structs hold
// (a string, an object; args any value). Anything else, genesis and policy
// records too, returns ok false and goes to encoding/json, which gives the
// error the index records. TestIndexChangeFast holds the two equal.
func indexChangeFast(agent string, seq uint64, rec []byte) (ch IndexChange, ok bool) {
	r := fastReaders.Get().(*fastReader)
	defer fastReaders.Put(r)
	var v fastRecord
	if !r.record(rec, &v) || v.kind == nil {
		return ch, false
	}
	var kindBuf [16]byte
	kind, ok := unquoteInto(kindBuf[:0], v.kind)
	if !ok {
		return ch, false
	}
	switch string(kind) {
	case "termination": // its body is not read (only valid JSON)
		ch.Terminated = true
		return ch, true
	case "action":
		if !v.body || !v.request || !v.verdict { // null or absent: encoding/json reads them alike, this does not
			return ch, false
		}
		var decisionBuf [16]byte
		decision, ok := unquoteInto(decisionBuf[:0], v.decision)
		if !ok {
			return ch, false
		}
		if string(decision) == "pending" { // the other strings only need to be strings, which object checked
			at, ok1 := unquote(v.at)
			id, ok2 := unquote(v.id)
			tool, ok3 := unquote(v.tool)
			if !ok1 || !ok2 || !ok3 {
				return ch, false
			}
			ch.AddPending = pendingRow(agent, seq, at, id, tool, v.args)
		}
		return ch, true
	case "approval":
		if !v.body {
			return ch, false
		}
		id, ok := unquote(v.requestID)
		if !ok {
			return ch, false
		}
		ch.RemovePending = id
		return ch, true
	}
	return ch, false
}

// fastRecord is what indexChangeFast reads of a record: raw values (they
// alias the record; nil if absent) and which objects were there.
type fastRecord struct {
	kind, at               jsontext.Value
	body, request, verdict bool // the body, its request and its verdict are objects
	id, tool, args         jsontext.Value
	decision, requestID    jsontext.Value
}

// The members indexChangeFast reads, by object: the record, a body (an
// action's request and verdict, an approval's request_id), a request (id,
// tool, args) and a verdict. A member whose value must be an object or a
// string says so by its kind.
var (
	topMembers     = []member{{"kind", '"'}, {"at", '"'}, {"body", 0}}
	bodyMembers    = []member{{"request", '{'}, {"verdict", '{'}, {"request_id", '"'}}
	requestMembers = []member{{"id", '"'}, {"tool", '"'}, {"args", 0}}
	verdictMembers = []member{{"decision", '"'}}
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

// record reads rec, which must be one JSON object (nothing but whitespace
// after it), into v, descending into an object body, its request and its
// verdict. It reports false where object does, and for text that is not
// valid JSON.
func (r *fastReader) record(rec []byte, v *fastRecord) bool {
	r.buf = *bytes.NewBuffer(rec)
	d := r.dec
	d.Reset(&r.buf, allowDuplicateNames)
	value := func(into *jsontext.Value) bool {
		var err error
		*into, err = d.ReadValue()
		return err == nil
	}
	ok := r.object(topMembers, func(i int) bool {
		switch i {
		case 0:
			return value(&v.kind)
		case 1:
			return value(&v.at)
		}
		if d.PeekKind() != '{' { // a termination's body is not read
			return d.SkipValue() == nil
		}
		v.body = true
		return r.object(bodyMembers, func(i int) bool {
			switch i {
			case 0:
				v.request = true
				return r.object(requestMembers, func(i int) bool {
					switch i {
					case 0:
						return value(&v.id)
					case 1:
						return value(&v.tool)
					}
					return value(&v.args)
				})
			case 1:
				v.verdict = true
				return r.object(verdictMembers, func(int) bool { return value(&v.decision) })
			}
			return value(&v.requestID)
		})
	})
	if !ok {
		return false
	}
	_, err := d.ReadToken()
	return err == io.EOF
}

// object reads the object that comes next and calls read(i), which reads
// the value, for each member named as members[i]; it skips the others. It
// reports false for text that is not valid JSON, for a member of members
// present twice, named with an escape or in another letter case, or of
// another kind than its member says, for any other member whose name could
// be one of members, and if read does. Duplicate names are allowed
// elsewhere, as encoding/json allows them.
func (r *fastReader) object(members []member, read func(i int) bool) bool {
	d := r.dec
	if d.PeekKind() != '{' {
		return false
	}
	if _, err := d.ReadToken(); err != nil {
		return false
	}
	var seen uint8
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
		if seen&(1<<i) != 0 || (members[i].kind != 0 && d.PeekKind() != members[i].kind) {
			return false
		}
		seen |= 1 << i
		if !read(i) {
			return false
		}
	}
	_, err := d.ReadToken() // the '}'
	return err == nil
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
