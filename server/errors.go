package server

import (
	"context"
	"errors"

	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
)

// httpError is an error answer: the body of every error response
// (api.Error; its code gives its status, api.Status) and, for a 429, the
// Retry-After to send.
type httpError struct {
	wire       api.Error
	retryAfter int // seconds, for a 429
}

func (e *httpError) Error() string { return e.wire.Code + ": " + e.wire.Message }

// newError is the answer of code (its status from the api's table) with a
// message for people.
func newError(code, message string) *httpError {
	return &httpError{wire: api.Error{Status: api.Status(code), Code: code, Message: message}}
}

func badRequest(err error) *httpError {
	if errors.Is(err, errTooLarge) {
		return newError(api.CodeTooLarge, err.Error())
	}
	return newError(api.CodeBadRequest, err.Error())
}

// errorOf maps the runtime's and the store's errors to statuses and codes,
// once for every handler: lineage's sentinels by the api's table
// (api.CodeOf), the store's conditions here. What is not a known condition
// of the request is the service's own failure: 503, nothing acknowledged
// (fail closed).
func errorOf(err error) *httpError {
	var e *httpError
	if errors.As(err, &e) {
		return e
	}
	var list diag.List
	var chain *runtime.ChainError
	var damage *store.DamageError
	code := api.CodeUnavailable
	switch {
	case errors.Is(err, store.ErrUnknownOutcome): // sent, commit not confirmed: maybe recorded (docs/stores.md)
		return newError(api.CodeUnknownOutcome, err.Error())
	case errors.Is(err, store.ErrUnavailable): // the database is away: nothing acknowledged (docs/stores.md)
		return newError(api.CodeUnavailable, err.Error())
	case errors.As(err, &list):
		return invalidPolicy(list)
	}
	if c, ok := api.CodeOf(err); ok {
		return newError(c, err.Error())
	}
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrBadAgent):
		code = api.CodeUnknownAgent
	case errors.As(err, &chain), errors.As(err, &damage), errors.Is(err, store.ErrDamaged):
		code = api.CodeCorrupt
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		code = api.CodeUnavailable
	}
	return newError(code, err.Error())
}

// invalidPolicy is the answer for a policy that does not compile: its diagnostics.
func invalidPolicy(list diag.List) *httpError {
	e := newError(api.CodeInvalidPolicy, "the policy is invalid")
	e.wire.Errors = list
	return e
}
