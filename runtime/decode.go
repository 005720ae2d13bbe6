package runtime

import (
	"errors"
	"strings"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/internal/strictjson"
)

// Request JSON text (the CLI's --args, the conformance runner's args_json)
// becomes values through DecodeJSON, which is the project's one strict reader
// (internal/strictjson), as the service's bodies are.

// maxDecodeDepth bounds the nesting DecodeJSON builds; checkRequest refuses
// args deeper than MaxArgsDepth anyway.
const maxDecodeDepth = 2 * MaxArgsDepth

// DecodeJSON decodes one JSON value strictly: valid UTF-8, no lone surrogate
// escape, no duplicate key in any object, numbers a double holds as written
// (docs/decision-order.md), nothing after the value, at most MaxRequestBytes.
// Numbers stay exact (json.Number). Errors wrap lineage.ErrBadRequest and
// name the JSON pointer of what is wrong.
func DecodeJSON(data []byte) (any, error) { return decodeJSON(data, "the text is") }

// decodeJSON is DecodeJSON; what starts its messages ("args are").
func decodeJSON(data []byte, what string) (any, error) {
	if len(data) > MaxRequestBytes {
		return nil, badRequest("%s %d bytes, over the limit of %d", what, len(data), MaxRequestBytes)
	}
	v, err := strictjson.Decode(data, maxDecodeDepth)
	if err != nil {
		var je *strictjson.Error
		if errors.As(err, &je) {
			if strings.HasPrefix(je.Message, "not JSON") {
				return nil, badRequest("%s %s at %s", what, je.Message, pointerOrRoot(je.Pointer))
			}
			return nil, badRequest("%s at %s", je.Message, pointerOrRoot(je.Pointer))
		}
		return nil, badRequest("%s not JSON: %v", what, err)
	}
	return v, nil
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
	if err := checkNewID(req.ID); err != nil {
		return req, err
	}
	if _, err := checkRequest(req); err != nil {
		return req, err
	}
	return req, nil
}
