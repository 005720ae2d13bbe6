// Package nodes holds the tests and the benchmark of several guard nodes
// (docs/stores.md): three servers, each with its own runtime over its own
// PostgreSQL pool on one database that runtime/store/postgres/pgtest starts, and many
// clients spread over them. It lives beside the bench harness because it
// drives the whole service (server, client, runtime, the PostgreSQL store)
// and nothing imports it. It has no code of its own.
package nodes
