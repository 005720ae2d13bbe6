package lineage

import "errors"

// Errors of the guard service (docs/service.md) that the runtime, the server and the
// client share, beside the ones in types.go. Each one's text is its error code
// on the wire; package api maps the codes to them.
var (
	// ErrUnknownRequest: the agent has no request with this id.
	ErrUnknownRequest = errors.New("unknown_request")
	// ErrInvalidPolicy: a policy document does not compile; nothing was created.
	ErrInvalidPolicy = errors.New("invalid_policy")
	// ErrUnauthorized: no token, or a token the server does not know (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: a valid token without the right to this call (403).
	ErrForbidden = errors.New("forbidden")
	// ErrServiceUnavailable: the service's answer unavailable (503): its store
	// cannot be written, nothing was acknowledged. A store's own condition is
	// store.ErrUnavailable, which the service answers with this code.
	ErrServiceUnavailable = errors.New("unavailable")
	// ErrUnknownOutcome: a write whose commit could not be confirmed; it may
	// have been recorded or not (503). A retry with the same request id
	// resolves it (docs/stores.md).
	ErrUnknownOutcome = errors.New("unknown_outcome")
	// ErrTooManyRequests: the agent's token is over its request quota; nothing
	// was recorded (429, with Retry-After).
	ErrTooManyRequests = errors.New("too_many_requests")
)
