#!/usr/bin/env bash
# The whole test suite: vet, then every package's tests against real
# PostgreSQL (DATABASE_URL, default the local server's "test" database) and
# embedded SQLite, then the dashboard's browser tests in headless Chromium
# (web/e2e; needs node and Debian's chromium — .ci/run installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
go vet ./...
go test -count=1 -timeout 20m ./...

# The Helm chart (its own module, so the Kubernetes libraries stay out of the
# service's build): render offline and decode strictly into k8s.io/api types.
(cd infra/helm && go vet ./... && go test -count=1 ./...)

# Dashboard browser tests: build and start the real server and emulator,
# drive Debian's chromium with playwright-core. Outside CI a missing
# chromium skips them; with CI=true it fails.
if [ ! -d web/e2e/node_modules ]; then
  (cd web/e2e && npm ci --no-audit --no-fund --loglevel=error)
fi
(cd web/e2e && npm test)
