// Package api is the wire vocabulary shared by the guard service (package
// server, its inbox) and its clients (package client, the CLI's --server
// mode, the MCP proxy): the error body {code, message, errors} with its
// stable codes and the table that maps each code to its HTTP status and to
// the sentinel of package lineage a Go caller matches it with, and the
// request, response and event types of the HTTP API of docs/service.md.
// OPA's v1/server/types is the model.
//
// A type that crosses the wire is written here once; the OpenAPI document
// (server/openapi.json) is held to these types by a test. The package holds
// no behaviour beyond the code table: it imports package lineage (verdicts,
// states, times, sentinels) and the diagnostics' leaf package, nothing from
// the runtime, the server or the client.
package api
