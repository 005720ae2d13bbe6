package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/lineage-guard/lineage"
)

// Error is the body of every error answer of the service (docs/service.md):
// a stable code, a message for people and, for an invalid policy, its
// diagnostics as `lineagec check --format json` prints them. errors.Is
// matches it against lineage's sentinels by its code:
// errors.Is(err, lineage.ErrIDConflict).
type Error struct {
	// Status is the HTTP status the error came with (not in the body).
	Status  int          `json:"-"`
	Code    string       `json:"code"`
	Message string       `json:"message"`
	Errors  []Diagnostic `json:"errors,omitempty"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%s (HTTP %d)", e.Code, e.Status)
	}
	return e.Message
}

// Is reports whether target is the sentinel of e's code (Sentinel).
func (e *Error) Is(target error) bool {
	s := Sentinel(e.Code)
	return s != nil && s == target
}

// The stable error codes of the API. Never rename one.
const (
	CodeBadRequest     = "bad_request"
	CodeInvalidPolicy  = "invalid_policy"
	CodeUnauthorized   = "unauthorized"
	CodeForbidden      = "forbidden"
	CodeUnknownAgent   = "unknown_agent"
	CodeUnknownRequest = "unknown_request"
	CodeNotFound       = "not_found"
	CodeMethod         = "method_not_allowed"
	CodeIDConflict     = "id_conflict"
	CodeNotPending     = "not_pending"
	CodeSealed         = "sealed"
	CodeTooLarge       = "too_large"
	CodeCorrupt        = "corrupt_log"
	CodeUnavailable    = "unavailable"
	// CodeUnknownOutcome: a write whose commit could not be confirmed (503):
	// it may be recorded or not; a retry with the same request id resolves
	// it (docs/stores.md).
	CodeUnknownOutcome = "unknown_outcome"
	// CodeClockUnsynced: on a shared store, the node cannot bound its clock's
	// error from the store's within --max-clock-error; writes are refused
	// (503) and /health says why (docs/stores.md).
	CodeClockUnsynced = "clock_unsynced"
	// CodeTooManyRequests: an agent's token over its request quota (429,
	// Retry-After; docs/service.md). Nothing was recorded.
	CodeTooManyRequests = "too_many_requests"
	// CodeNoCheckpointKey: the server was started without --checkpoint-key.
	CodeNoCheckpointKey = "no_checkpoint_key"
	// CodeUnknownRecord: a proof of a seq the log (or the asked tree) does not have.
	CodeUnknownRecord = "unknown_record"
	// CodeCheckpointDiverged: the log is no longer an extension of the last
	// checkpoint this server signed (a rewrite or a truncation of its store).
	CodeCheckpointDiverged = "checkpoint_diverged"
)

// code is one row of the code table.
type code struct {
	name   string
	status int
	// sentinel is what a client's *Error of this code matches (errors.Is);
	// nil: none.
	sentinel error
	// from are the sentinels whose errors the service answers with this
	// code (CodeOf).
	from []error
}

// codes is the one table of the API's error codes: each one's HTTP status,
// the sentinel a Go caller matches it with, and the sentinels the service
// answers with it. too_large matches lineage.ErrBadRequest (the body was
// refused, nothing was done) but is answered only for an oversized body.
var codes = []code{
	{CodeBadRequest, http.StatusBadRequest, lineage.ErrBadRequest,
		[]error{lineage.ErrBadRequest, lineage.ErrTimeBackwards, lineage.ErrBadApprover}},
	{CodeInvalidPolicy, http.StatusBadRequest, lineage.ErrInvalidPolicy, []error{lineage.ErrInvalidPolicy}},
	{CodeUnauthorized, http.StatusUnauthorized, lineage.ErrUnauthorized, nil},
	{CodeForbidden, http.StatusForbidden, lineage.ErrForbidden, nil},
	{CodeUnknownAgent, http.StatusNotFound, lineage.ErrUnknownAgent, []error{lineage.ErrUnknownAgent}},
	{CodeUnknownRequest, http.StatusNotFound, lineage.ErrUnknownRequest, []error{lineage.ErrUnknownRequest}},
	{CodeNotFound, http.StatusNotFound, nil, nil},
	{CodeMethod, http.StatusMethodNotAllowed, nil, nil},
	{CodeIDConflict, http.StatusConflict, lineage.ErrIDConflict, []error{lineage.ErrIDConflict}},
	{CodeNotPending, http.StatusConflict, lineage.ErrNotPending, []error{lineage.ErrNotPending}},
	{CodeSealed, http.StatusConflict, lineage.ErrSealed, []error{lineage.ErrSealed}},
	{CodeTooLarge, http.StatusRequestEntityTooLarge, lineage.ErrBadRequest, nil},
	{CodeCorrupt, http.StatusInternalServerError, lineage.ErrCorrupt, []error{lineage.ErrCorrupt}},
	{CodeUnavailable, http.StatusServiceUnavailable, lineage.ErrServiceUnavailable, nil},
	{CodeUnknownOutcome, http.StatusServiceUnavailable, lineage.ErrUnknownOutcome, nil},
	{CodeClockUnsynced, http.StatusServiceUnavailable, nil, nil},
	{CodeTooManyRequests, http.StatusTooManyRequests, lineage.ErrTooManyRequests, nil},
	{CodeNoCheckpointKey, http.StatusNotImplemented, nil, nil},
	{CodeUnknownRecord, http.StatusNotFound, nil, nil},
	{CodeCheckpointDiverged, http.StatusInternalServerError, nil, nil},
}

// Codes lists every error code of the API, in the table's order.
func Codes() []string {
	out := make([]string, len(codes))
	for i, c := range codes {
		out[i] = c.name
	}
	return out
}

func lookup(name string) (code, bool) {
	for _, c := range codes {
		if c.name == name {
			return c, true
		}
	}
	return code{}, false
}

// Status is the HTTP status of an error code; 503 for a code the table
// does not have (the service's own failure).
func Status(name string) int {
	if c, ok := lookup(name); ok {
		return c.status
	}
	return http.StatusServiceUnavailable
}

// Sentinel is the sentinel of package lineage that an *Error of this code
// matches, or nil.
func Sentinel(name string) error {
	c, _ := lookup(name)
	return c.sentinel
}

// CodeOf is the code the service answers err with when err is one of
// lineage's sentinels (errors.Is), and whether it is.
func CodeOf(err error) (string, bool) {
	for _, c := range codes {
		for _, s := range c.from {
			if errors.Is(err, s) {
				return c.name, true
			}
		}
	}
	return "", false
}
