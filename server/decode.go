package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/lineage-guard/lineage/internal/jsontext"
)

// maxBody is the largest request body the service reads (docs/service.md: over it, 413).
const maxBody = 1 << 20

// maxDepth bounds the nesting of a body's JSON.
const maxDepth = 64

// errTooLarge marks a body over maxBody.
var errTooLarge = errors.New("request body is over 1 MiB")

// decodeBody reads r's JSON body into v: one JSON object, with numbers kept
// exact (json.Number), no field that v does not have, no key twice in one
// object, valid UTF-8, nothing after it. It is the one place request bodies
// are decoded, so a stricter decoder can take its place.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errTooLarge
		}
		return fmt.Errorf("reading the body: %v", err)
	}
	return decodeJSON(body, v)
}

// decodeJSON is decodeBody's check and decoding of the bytes.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return errors.New("the body is empty; it must be a JSON object")
	}
	if !utf8.Valid(body) {
		return errors.New("the body is not valid UTF-8")
	}
	// encoding/json would turn \ud800 into U+FFFD without a word.
	if r, at, lone := jsontext.LoneSurrogate(body); lone {
		return fmt.Errorf("the body has a lone surrogate escape \\u%04x at byte %d: strings must be valid Unicode", r, at)
	}
	if err := checkKeys(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describe(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

// describe makes encoding/json's errors name the field as a JSON pointer.
func describe(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := "/" + strings.ReplaceAll(te.Field, ".", "/")
		if te.Field == "" {
			return fmt.Errorf("the body must be a JSON object, not %s", te.Value)
		}
		return fmt.Errorf("%s: expected %s, got %s", field, jsonType(te.Type.String()), te.Value)
	case errors.As(err, &se):
		return fmt.Errorf("the body is not JSON (at byte %d): %v", se.Offset, err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return fmt.Errorf("/%s: unknown field", name)
	}
	return fmt.Errorf("the body is not JSON: %v", err)
}

func jsonType(goType string) string {
	switch {
	case goType == "string" || goType == "*string":
		return "a string"
	case strings.HasPrefix(goType, "map["):
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

// checkKeys refuses JSON with a key twice in one object, or nested deeper than maxDepth.
func checkKeys(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := checkValue(dec, "", 0); err != nil {
		return err
	}
	return nil
}

// checkValue reads one JSON value from dec; ptr is its JSON pointer.
func checkValue(dec *json.Decoder, ptr string, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return describe(err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth++; depth > maxDepth {
		return fmt.Errorf("%s: nested deeper than %d levels", orRoot(ptr), maxDepth)
	}
	switch d {
	case '{':
		keys := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return describe(err)
			}
			key, _ := tok.(string)
			at := ptr + "/" + escape(key)
			if keys[key] {
				return fmt.Errorf("%s: duplicate key %q", at, key)
			}
			keys[key] = true
			if err := checkValue(dec, at, depth); err != nil {
				return err
			}
		}
	case '[':
		for i := 0; dec.More(); i++ {
			if err := checkValue(dec, fmt.Sprintf("%s/%d", ptr, i), depth); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return describe(err)
	}
	return nil
}

func orRoot(ptr string) string {
	if ptr == "" {
		return "/"
	}
	return ptr
}

// escape makes a key a JSON pointer token (RFC 6901).
func escape(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}
