// Package server is the guard service of docs/service.md (`lineagec serve`): it turns
// HTTP into calls of the runtime and the runtime's results and errors into HTTP.
//
// It owns the principals and their tokens (admins and approvers from an auth
// file, agents by an HMAC of their id under the server key), the routes, the
// status codes and error bodies, request decoding (unknown fields, duplicate
// keys and oversized bodies refused), the server-sent event stream, the
// Prometheus metrics and the embedded OpenAPI document. It decides nothing
// about verdicts: those come from package runtime, and the time of every
// request from the server's clock.
package server
