#!/usr/bin/env bash
# Every test of lineage, as CI runs it (README "Set up and run"). Needs Go, Node
# (npm) and, for the store and inbox tests, PostgreSQL's binaries and chromium
# (.ci/run installs those on a Debian machine).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --prefix schema/testdata/ajv --no-audit --no-fund --loglevel=error
npm ci --prefix mcpproxy/testdata/npm --no-audit --no-fund --loglevel=error
npm ci --prefix server/testdata/npm --no-audit --no-fund --loglevel=error
# The TypeScript client (its prepare script builds dist/). A go.mod in its node_modules makes
# that tree a module of its own, so `go list ./...` and `go vet ./...` never descend into it
# (an npm package may ship .go files).
npm ci --prefix clients/typescript --no-audit --no-fund --loglevel=error
printf 'module ignored/node_modules\n' > clients/typescript/node_modules/go.mod
# go test ./... prints through internal/skipsummary (the same lines as without
# -json), which keeps the tests that skipped, and why, for the end: outside CI
# a test whose real part is missing here skips (under CI=true it fails).
skipped=$(mktemp)
trap 'cat "$skipped"; rm -f "$skipped"' EXIT
# One command a line: under set -e a failing command stops the script (in an a && b
# list only the last one would).
go test -timeout 30m -json ./... | go run ./internal/skipsummary -summary "$skipped"
go test -timeout 30m -race -short ./...
go test -timeout 30m -run '^$' -bench . -benchtime 1x ./...
# The service as deployed (docs/performance.md): OPA's server, the guard and the load each a
# process of their own, one short round a level; the ratios to issue 20's targets are
# printed, not asserted (a shared machine is noisy).
go run ./cmd/lineagec bench serve --json --rounds 1 --duration 1s
