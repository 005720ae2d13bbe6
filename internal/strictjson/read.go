package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"

	gojson "github.com/go-json-experiment/json"
	jt "github.com/go-json-experiment/json/jsontext"
)

// This file is the project's one strict JSON reader (docs/service.md,
// "Reading JSON"): request and other bodies, the runtime's DecodeJSON (the
// CLI's --args, case files' args), the auth file and records read back all
// come through Decode or Unmarshal. In one pass over the bytes it refuses
// invalid UTF-8 and lone surrogates, a member name twice in one object,
// numbers a double does not hold as written (NumberProblem), nesting beyond
// the limit and anything after the value; Unmarshal matches member names
// exactly (never Go's case folding) and refuses unknown ones. It is
// github.com/go-json-experiment/json's jsontext.Decoder, which already is
// case-sensitive and refuses duplicates and invalid Unicode, with the number
// rule added as each number token goes by.

// Error is what the reader refuses: Pointer (RFC 6901, "" for the top
// level) says where, Offset the byte, Message what.
type Error struct {
	Pointer string
	Offset  int64
	Message string
}

func (e *Error) Error() string {
	if e.Pointer == "" {
		return e.Message
	}
	return e.Pointer + ": " + e.Message
}

// DefaultDepth is the nesting Decode and Unmarshal allow when given 0.
const DefaultDepth = 64

// empty is what a pooled decoder reads between uses.
var empty io.Reader = emptyReader{}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, io.EOF }

var decoders = sync.Pool{New: func() any { return jt.NewDecoder(empty) }}

// Decode reads one JSON value: objects as map[string]any, arrays as []any,
// numbers as json.Number (exactly as written, checked by NumberProblem),
// strings, booleans and nil. maxDepth bounds the nesting (0: DefaultDepth).
func Decode(data []byte, maxDepth int) (any, error) {
	if maxDepth <= 0 {
		maxDepth = DefaultDepth
	}
	dec := decoders.Get().(*jt.Decoder)
	defer func() { dec.Reset(empty); decoders.Put(dec) }()
	dec.Reset(bytes.NewReader(data))
	v, err := readValue(dec, maxDepth)
	if err != nil {
		return nil, describe(err, data)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, &Error{Offset: dec.InputOffset(), Message: "unexpected data after the JSON value"}
	}
	return v, nil
}

// Unmarshal reads one JSON value into v (a pointer to a struct, usually):
// member names matched exactly, an unknown member refused, and every value
// that lands in an `any` (a map[string]any's members included) read as Decode
// reads it. It is one pass over the bytes.
func Unmarshal(data []byte, v any, maxDepth int) error {
	if maxDepth <= 0 {
		maxDepth = DefaultDepth
	}
	if err := gojson.Unmarshal(data, v, unmarshalOptions(maxDepth)); err != nil {
		return describe(err, data)
	}
	return nil
}

// UnmarshalOpen is Unmarshal for documents that another program defines and
// may grow (a Claude Code hook event, the policy inside a policy record):
// member names are still matched exactly, duplicates, invalid Unicode and
// numbers a double does not hold are still refused in the members read, but a
// member v has no field for is skipped (checked as JSON, never bound).
func UnmarshalOpen(data []byte, v any, maxDepth int) error {
	if maxDepth <= 0 {
		maxDepth = DefaultDepth
	}
	o := gojson.JoinOptions(unmarshalOptions(maxDepth), gojson.RejectUnknownMembers(false))
	if err := gojson.Unmarshal(data, v, o); err != nil {
		return describe(err, data)
	}
	return nil
}

// optionsByDepth caches Unmarshal's options, one set per depth limit (a
// handful: the callers use constants), so a call builds none.
var optionsByDepth sync.Map // int → gojson.Options

func unmarshalOptions(maxDepth int) gojson.Options {
	if o, ok := optionsByDepth.Load(maxDepth); ok {
		return o.(gojson.Options)
	}
	o := gojson.JoinOptions(
		gojson.RejectUnknownMembers(true),
		gojson.WithUnmarshalers(gojson.UnmarshalFromFunc(func(dec *jt.Decoder, out *any) error {
			x, err := readValue(dec, maxDepth)
			if err != nil {
				return err
			}
			*out = x
			return nil
		})))
	optionsByDepth.Store(maxDepth, o)
	return o
}

// readValue reads the next value from dec.
func readValue(dec *jt.Decoder, maxDepth int) (any, error) {
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, err
	}
	return rest(dec, tok, maxDepth)
}

func rest(dec *jt.Decoder, tok jt.Token, maxDepth int) (any, error) {
	switch tok.Kind() {
	case 'n':
		return nil, nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	case '"':
		return tok.String(), nil
	case '0':
		s := tok.String()
		if p := NumberProblem(s); p != "" {
			return nil, &Error{Pointer: string(dec.StackPointer()), Offset: dec.InputOffset(), Message: "number " + s + " " + p}
		}
		return json.Number(s), nil
	case '[':
		if dec.StackDepth() > maxDepth {
			return nil, &Error{Pointer: string(dec.StackPointer().Parent()), Offset: dec.InputOffset(), Message: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
		}
		arr := []any{}
		for {
			tok, err := dec.ReadToken()
			if err != nil {
				return nil, err
			}
			if tok.Kind() == ']' {
				return arr, nil
			}
			v, err := rest(dec, tok, maxDepth)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
	case '{':
		if dec.StackDepth() > maxDepth {
			return nil, &Error{Pointer: string(dec.StackPointer().Parent()), Offset: dec.InputOffset(), Message: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
		}
		obj := map[string]any{}
		for {
			tok, err := dec.ReadToken()
			if err != nil {
				return nil, err
			}
			if tok.Kind() == '}' {
				return obj, nil
			}
			key := tok.String() // the decoder refused a second one already
			v, err := readValue(dec, maxDepth)
			if err != nil {
				return nil, err
			}
			obj[key] = v
		}
	}
	return nil, fmt.Errorf("unexpected %v", tok.Kind())
}

// describe turns the decoder's errors into an *Error that says what is wrong
// in the words the service has always used, and where (a JSON pointer).
func describe(err error, data []byte) error {
	var own *Error
	var syn *jt.SyntacticError
	var sem *gojson.SemanticError
	switch {
	case errors.As(err, &own):
		return own
	case errors.As(err, &syn):
		ptr := string(syn.JSONPointer)
		switch {
		case errors.Is(syn.Err, jt.ErrDuplicateName):
			return &Error{Pointer: ptr, Offset: syn.ByteOffset, Message: fmt.Sprintf("duplicate key %q", lastToken(ptr))}
		case strings.Contains(syn.Err.Error(), "surrogate"):
			esc := surrogateEscape.FindString(syn.Err.Error())
			if esc == "" {
				esc = "escape"
			}
			return &Error{Pointer: ptr, Offset: syn.ByteOffset, Message: fmt.Sprintf("lone surrogate %s (not valid Unicode) in a string at byte %d", esc, syn.ByteOffset)}
		case strings.Contains(syn.Err.Error(), "invalid UTF-8"):
			return &Error{Pointer: ptr, Offset: syn.ByteOffset, Message: fmt.Sprintf("not valid UTF-8 (at byte %d)", syn.ByteOffset)}
		case errors.Is(syn.Err, io.ErrUnexpectedEOF):
			return &Error{Pointer: ptr, Offset: syn.ByteOffset, Message: "not JSON: unexpected end of input"}
		case strings.Contains(syn.Err.Error(), "after top-level value"):
			what := "value"
			if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
				what = "object"
			}
			return &Error{Offset: syn.ByteOffset, Message: "unexpected data after the JSON " + what}
		case strings.Contains(syn.Err.Error(), "exceeded max depth"):
			return &Error{Pointer: ptr, Offset: syn.ByteOffset, Message: "nested too deep"}
		}
		return &Error{Pointer: ptr, Offset: syn.ByteOffset, Message: fmt.Sprintf("not JSON (at byte %d): %v", syn.ByteOffset, syn.Err)}
	case errors.As(err, &sem):
		ptr := string(sem.JSONPointer)
		switch {
		case errors.As(sem.Err, &own):
			return own
		case errors.As(sem.Err, &syn):
			return describe(syn, data)
		case errors.Is(sem.Err, gojson.ErrUnknownName):
			return &Error{Pointer: ptr, Offset: sem.ByteOffset, Message: "unknown field"}
		case sem.GoType != nil:
			got := kindName(sem.JSONKind)
			if ptr == "" {
				return &Error{Offset: sem.ByteOffset, Message: fmt.Sprintf("the body must be a JSON object, not %s", got)}
			}
			return &Error{Pointer: ptr, Offset: sem.ByteOffset, Message: fmt.Sprintf("expected %s, got %s", goKind(sem.GoType.String()), got)}
		}
		return &Error{Pointer: ptr, Offset: sem.ByteOffset, Message: "not JSON: " + sem.Error()}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Offset: int64(len(data)), Message: "not JSON: unexpected end of input"}
	}
	return &Error{Message: "not JSON: " + err.Error()}
}

// surrogateEscape finds the escape the decoder's message quotes.
var surrogateEscape = regexp.MustCompile(`\\u[dD][89a-fA-F][0-9a-fA-F]{2}`)

func lastToken(ptr string) string {
	if i := strings.LastIndexByte(ptr, '/'); i >= 0 {
		return strings.ReplaceAll(strings.ReplaceAll(ptr[i+1:], "~1", "/"), "~0", "~")
	}
	return ptr
}

func kindName(k jt.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 't', 'f':
		return "bool"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "a value"
}

func goKind(goType string) string {
	switch {
	case goType == "string" || goType == "*string":
		return "a string"
	case strings.HasPrefix(goType, "map["), strings.HasPrefix(goType, "struct"):
		return "an object"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case goType == "bool":
		return "a boolean"
	case strings.Contains(goType, "int"), strings.Contains(goType, "float"), goType == "json.Number":
		return "a number"
	}
	return goType
}
