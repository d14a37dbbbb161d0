#!/usr/bin/env bash
# The whole test suite: vet, then every package's tests against real
# PostgreSQL (DATABASE_URL, default the local server's "test" database) and
# embedded SQLite.
set -euo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
go vet ./...
go test -count=1 -timeout 20m ./...
