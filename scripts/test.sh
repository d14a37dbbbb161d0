#!/usr/bin/env bash
# The whole test suite: vet, then every package's tests against real
# PostgreSQL (DATABASE_URL, default the local server's "test" database) and
# embedded SQLite, the Helm chart's tests, then the dashboard's browser
# tests in headless Chromium (web/e2e; needs node and Debian's chromium).
#
# go test runs with -json; cmd/testsummary prints go test's usual ok/FAIL
# lines from it and, at the end, ONE line:
#   summary: N passed, N failed, N skipped — ran …; skipped: <why> ×n (where); …
# A test that needs a missing tool (Postgres, stripe-mock, Chromium, node)
# skips with "needs <tool>: …" and is named there. With CI=true (.ci/run,
# which installs every tool) such a skip is a failure. Exit status is 1
# when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
out=$(mktemp -d "${TMPDIR:-/tmp}/rb-test.XXXXXX")
trap 'rm -rf "$out"' EXIT
status=0
report=()

go build -o "$out/testsummary" ./cmd/testsummary || { echo "test.sh: cannot build cmd/testsummary"; exit 1; }

if ! go vet ./...; then
  status=1 report+=(-fail "go vet=reported problems (above)")
fi
go test -count=1 -timeout 20m -json ./... 2>&1 | tee "$out/go.jsonl" | "$out/testsummary" print || status=1
report+=(-go "go test ./...=$out/go.jsonl")

# The Helm chart (its own module, so the Kubernetes libraries stay out of the
# service's build): render offline and decode strictly into k8s.io/api types.
if ! (cd infra/helm && go vet ./...); then
  status=1 report+=(-fail "infra/helm go vet=reported problems (above)")
fi
(cd infra/helm && go test -count=1 -json ./...) 2>&1 | tee "$out/helm.jsonl" | "$out/testsummary" print || status=1
report+=(-go "infra/helm=$out/helm.jsonl")

# Dashboard browser tests: build and start the real server and emulator,
# drive Debian's chromium with playwright-core. Outside CI a missing
# chromium skips them; with CI=true it fails. The TAP copy feeds the summary.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  report+=(-skip "web/e2e=needs node: node and npm not on PATH (apt-get install -y nodejs npm)")
elif [ ! -d web/e2e/node_modules ] && ! (cd web/e2e && npm ci --no-audit --no-fund --loglevel=error); then
  report+=(-skip "web/e2e=needs npm packages: npm ci in web/e2e failed (above)")
else
  (cd web/e2e && npm test -- --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$out/e2e.tap") || status=1
  if [ -s "$out/e2e.tap" ]; then
    report+=(-tap "web/e2e=$out/e2e.tap")
  else
    status=1 report+=(-fail "web/e2e=node's test runner wrote no results (above)")
  fi
fi

echo
"$out/testsummary" report -trim "$(go list -m)/" "${report[@]}" || status=1
exit $status
