package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
)

// Error is the body of every error response (docs/service.md): a stable code, a
// message for people and, for an invalid policy, its diagnostics as
// `lineagec check --format json` prints them.
type Error struct {
	Code    string    `json:"code"`
	Message string    `json:"message"`
	Errors  diag.List `json:"errors,omitempty"`

	status     int
	retryAfter int // seconds, for a 429
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

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
)

func newError(status int, code, message string) *Error {
	return &Error{status: status, Code: code, Message: message}
}

func badRequest(err error) *Error {
	if errors.Is(err, errTooLarge) {
		return newError(http.StatusRequestEntityTooLarge, CodeTooLarge, err.Error())
	}
	return newError(http.StatusBadRequest, CodeBadRequest, err.Error())
}

// errorOf maps the runtime's and the store's errors to statuses and codes,
// once for every handler. What is not a known condition of the request is
// the service's own failure: 503, nothing acknowledged (fail closed).
func errorOf(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var list diag.List
	var chain *runtime.ChainError
	var damage *store.DamageError
	status, code := http.StatusServiceUnavailable, CodeUnavailable
	switch {
	case errors.Is(err, store.ErrUnknownOutcome): // sent, commit not confirmed: maybe recorded (docs/stores.md)
		return &Error{status: http.StatusServiceUnavailable, Code: CodeUnknownOutcome, Message: err.Error()}
	case errors.Is(err, store.ErrUnavailable): // the database is away: nothing acknowledged (docs/stores.md)
		return &Error{status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: err.Error()}
	case errors.As(err, &list):
		return &Error{status: http.StatusBadRequest, Code: CodeInvalidPolicy, Message: "the policy is invalid", Errors: list}
	case errors.Is(err, lineage.ErrBadRequest), errors.Is(err, lineage.ErrTimeBackwards), errors.Is(err, lineage.ErrBadApprover):
		status, code = http.StatusBadRequest, CodeBadRequest
	case errors.Is(err, lineage.ErrInvalidPolicy):
		status, code = http.StatusBadRequest, CodeInvalidPolicy
	case errors.Is(err, lineage.ErrUnknownAgent), errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrBadAgent):
		status, code = http.StatusNotFound, CodeUnknownAgent
	case errors.Is(err, lineage.ErrUnknownRequest):
		status, code = http.StatusNotFound, CodeUnknownRequest
	case errors.Is(err, lineage.ErrIDConflict):
		status, code = http.StatusConflict, CodeIDConflict
	case errors.Is(err, lineage.ErrNotPending):
		status, code = http.StatusConflict, CodeNotPending
	case errors.Is(err, lineage.ErrSealed):
		status, code = http.StatusConflict, CodeSealed
	case errors.As(err, &chain), errors.As(err, &damage), errors.Is(err, lineage.ErrCorrupt), errors.Is(err, store.ErrDamaged):
		status, code = http.StatusInternalServerError, CodeCorrupt
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		status, code = http.StatusServiceUnavailable, CodeUnavailable
	}
	return &Error{status: status, Code: code, Message: err.Error()}
}
