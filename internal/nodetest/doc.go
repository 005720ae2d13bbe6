// Package nodetest holds the tests of several guard nodes (docs/stores.md): three
// servers, each with its own runtime over its own PostgreSQL pool on one
// database that runtime/store/postgres/pgtest starts, and many clients
// spread over them.
// It has no code of its own.
package nodetest
