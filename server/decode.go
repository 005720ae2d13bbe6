package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/lineage-guard/lineage/internal/strictjson"
)

// maxBody is the largest request body the service reads (docs/service.md: over it, 413).
const maxBody = 1 << 20

// maxDepth bounds the nesting of a body's JSON.
const maxDepth = 64

// errTooLarge marks a body over maxBody.
var errTooLarge = errors.New("request body is over 1 MiB")

// readBody reads r's JSON body into v with the project's one strict reader
// (internal/strictjson): one JSON object, member names matched exactly, no
// field that v does not have, no key twice in one object, valid Unicode,
// numbers a double holds as written, nothing after it.
func readBody(w http.ResponseWriter, r *http.Request, v any) error {
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

// decodeJSON is readBody's reading of the bytes.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return errors.New("the body is empty; it must be a JSON object")
	}
	return strictjson.Unmarshal(body, v, maxDepth)
}
