package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/internal/jsontext"
)

// This file is the one place where request JSON text becomes values (docs/decision-order.md):
// the CLI's --args, the conformance runner's args_json and the service's
// request bodies all come through DecodeJSON. encoding/json alone keeps the
// last of two duplicate keys and turns invalid UTF-8 and lone surrogate
// escapes (\ud800) into U+FFFD without a word; this decoder refuses them.

// maxDecodeDepth bounds the nesting DecodeJSON builds; checkRequest refuses
// args deeper than MaxArgsDepth anyway.
const maxDecodeDepth = 2 * MaxArgsDepth

// DecodeJSON decodes one JSON value strictly: valid UTF-8, no lone surrogate
// escape, no duplicate key in any object, nothing after the value, at most
// MaxRequestBytes. Numbers stay exact (json.Number). Errors wrap
// lineage.ErrBadRequest and name the JSON pointer of what is wrong.
func DecodeJSON(data []byte) (any, error) { return decodeJSON(data, "the text is") }

// decodeJSON is DecodeJSON; what starts its messages ("args are").
func decodeJSON(data []byte, what string) (any, error) {
	if len(data) > MaxRequestBytes {
		return nil, badRequest("%s %d bytes, over the limit of %d", what, len(data), MaxRequestBytes)
	}
	if !utf8.Valid(data) {
		return nil, badRequest("%s not valid UTF-8 (at byte %d)", what, invalidUTF8At(data))
	}
	d := &strictDecoder{data: data, dec: json.NewDecoder(bytes.NewReader(data)), what: what}
	d.dec.UseNumber()
	v, err := d.value("", 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.dec.Token(); err != io.EOF {
		return nil, badRequest("%s not JSON: unexpected data after the value", what)
	}
	return v, nil
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

type strictDecoder struct {
	data []byte
	dec  *json.Decoder
	what string
}

// token reads the next token and checks the raw text it came from: a string
// with a lone surrogate escape is refused where encoding/json would let it
// through as U+FFFD.
func (d *strictDecoder) token(ptr string) (json.Token, error) {
	from := d.dec.InputOffset()
	tok, err := d.dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, badRequest("%s not JSON: %v at %s", d.what, err, pointerOrRoot(ptr))
	}
	if _, ok := tok.(string); ok {
		if r, _, lone := jsontext.LoneSurrogate(d.data[from:d.dec.InputOffset()]); lone {
			return nil, badRequest(`lone surrogate \u%04x (not valid Unicode) in a string at %s`, r, pointerOrRoot(ptr))
		}
	}
	return tok, nil
}

func (d *strictDecoder) value(ptr string, depth int) (any, error) {
	tok, err := d.token(ptr)
	if err != nil {
		return nil, err
	}
	return d.rest(tok, ptr, depth)
}

// rest finishes the value that starts with tok.
func (d *strictDecoder) rest(tok json.Token, ptr string, depth int) (any, error) {
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // string, json.Number, bool or nil
	}
	if depth >= maxDecodeDepth {
		return nil, badRequest("JSON nests deeper than %d levels at %s", maxDecodeDepth, pointerOrRoot(ptr))
	}
	if delim == '[' {
		arr := []any{}
		for {
			iptr := ptr + "/" + strconv.Itoa(len(arr))
			tok, err := d.token(iptr)
			if err != nil {
				return nil, err
			}
			if tok == json.Delim(']') {
				return arr, nil
			}
			v, err := d.rest(tok, iptr, depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
	}
	obj := map[string]any{}
	for {
		tok, err := d.token(ptr)
		if err != nil {
			return nil, err
		}
		if tok == json.Delim('}') {
			return obj, nil
		}
		key, _ := tok.(string) // encoding/json yields only strings here
		kptr := ptr + "/" + escapePointer(key)
		if _, dup := obj[key]; dup {
			return nil, badRequest("duplicate key %q at %s", key, kptr)
		}
		v, err := d.value(kptr, depth+1)
		if err != nil {
			return nil, err
		}
		obj[key] = v
	}
}

func pointerOrRoot(ptr string) string {
	if ptr == "" {
		return "the top level"
	}
	return ptr
}

// ParseArgs decodes request args given as JSON text (the CLI's --args, a case
// step's args_json): one JSON object, decoded by DecodeJSON.
func ParseArgs(text string) (map[string]any, error) {
	v, err := decodeJSON([]byte(text), "args are")
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, badRequest("args must be a JSON object, got %s", jsonKind(v))
	}
	return m, nil
}

// DecodeRequest decodes a request given as JSON text, the shape of docs/decision-order.md:
// {"id"?: str, "tool": str, "args"?: object, "at"?: RFC 3339 time}. Unknown
// fields are errors, as every malformation of DecodeJSON and RequestOf is.
// The request is checked again, whole, when it is decided.
func DecodeRequest(data []byte) (lineage.Request, error) {
	v, err := decodeJSON(data, "the request is")
	if err != nil {
		return lineage.Request{}, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return lineage.Request{}, badRequest("a request must be a JSON object, got %s", jsonKind(v))
	}
	for k := range m {
		switch k {
		case "id", "tool", "args", "at":
		default:
			return lineage.Request{}, badRequest("unknown field %q in the request (it has id, tool, args and at)", k)
		}
	}
	req, err := RequestOf(m["id"], m["tool"], m["args"])
	if err != nil {
		return lineage.Request{}, err
	}
	if at, ok := m["at"]; ok && at != nil {
		s, ok := at.(string)
		if !ok {
			return lineage.Request{}, badRequest("at must be an RFC 3339 time string, got %s", jsonKind(at))
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return lineage.Request{}, badRequest("at %q is not an RFC 3339 time", s)
		}
		if err := recordable(t); err != nil {
			return lineage.Request{}, err
		}
		req.At = t
	}
	return req, nil
}

// RequestOf builds a request from decoded JSON values (nil for an absent
// field), refusing what the typed lineage.Request cannot hold: a tool that is
// not a string, an id that is not a string, args that are not an object.
// The conformance runner feeds it the steps of a case file, malformed ones too.
func RequestOf(id, tool, args any) (lineage.Request, error) {
	var req lineage.Request
	switch x := tool.(type) {
	case nil:
		return req, badRequest("tool is required")
	case string:
		req.Tool = x
	default:
		return req, badRequest("tool must be a string, got %s", jsonKind(tool))
	}
	switch x := id.(type) {
	case nil:
	case string:
		req.ID = x
	default:
		return req, badRequest("id must be a string, got %s", jsonKind(id))
	}
	switch x := args.(type) {
	case nil:
	case map[string]any:
		req.Args = x
	default:
		return req, badRequest("args must be a JSON object, got %s", jsonKind(args))
	}
	if _, err := checkRequest(req); err != nil {
		return req, err
	}
	return req, nil
}
