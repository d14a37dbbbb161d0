#!/usr/bin/env bash
# Run every fuzz target (func FuzzX in a _test.go file) for a while, one
# after the other:
#   bash scripts/fuzz.sh [-t DURATION] [-p WORKERS] [REGEXP]
# DURATION is go test's -fuzztime (default $FUZZTIME or 60s; "5m" for the
# long run), WORKERS its -parallel (default $FUZZ_PARALLEL or 1), REGEXP
# picks targets by name. Their seed corpora also run in every plain go test.
# A failing input is saved by go test under the package's
# testdata/fuzz/FuzzX/: commit it with the fix, it then runs as a
# regression in every go test. Ends with one line per target and exits 1
# when any target failed (a bare "context deadline exceeded" at the end
# of -fuzztime with no input saved is Go 1.26's coordinator, not a
# finding: the target's corpus is re-run and, passing, it counts as ok,
# marked so). docs/fuzzing.md records the runs.
set -uo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-60s}" workers="${FUZZ_PARALLEL:-1}"
while getopts "t:p:" o; do
  case "$o" in
    t) fuzztime="$OPTARG" ;;
    p) workers="$OPTARG" ;;
    *) echo "usage: $0 [-t duration] [-p workers] [regexp]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
pick="${1:-.}"

targets=()
while IFS= read -r f; do
  dir=$(dirname "$f")
  for name in $(grep -oE '^func Fuzz[A-Za-z0-9_]+' "$f" | sed 's/^func //'); do
    [[ "$name" =~ $pick ]] && targets+=("$dir $name")
  done
done < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | sort)
[ ${#targets[@]} -gt 0 ] || { echo "fuzz.sh: no target matches $pick"; exit 2; }

# execs is the last execution count a fuzz log reports.
execs() { grep -oE 'execs: [0-9]+' "$1" | tail -1 | grep -oE '[0-9]+' || echo "?"; }

status=0
results=()
for t in "${targets[@]}"; do
  read -r dir name <<<"$t"
  echo "=== $name (./$dir) for $fuzztime"
  log=$(mktemp)
  corpus="$dir/testdata/fuzz/$name"
  before=$(ls "$corpus" 2>/dev/null | sort)
  if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -parallel "$workers" "./$dir" 2>&1 | tee "$log"; then
    results+=("ok    $name ./$dir $fuzztime, $(execs "$log") execs")
  elif [ "$(ls "$corpus" 2>/dev/null | sort)" = "$before" ] && grep -q '^    context deadline exceeded$' "$log" &&
    go test -count=1 -run "^${name}\$" "./$dir" >/dev/null 2>&1; then
    # Go 1.26's fuzz coordinator can fail a target at the -fuzztime
    # boundary with a bare "context deadline exceeded" when its workers
    # are starved (a race in the coordinator, fixed in Go 1.27): no input
    # is saved and nothing is wrong with the target. Counted as ok once
    # its corpus passes again, and marked so.
    results+=("ok    $name ./$dir $fuzztime, $(execs "$log") execs (ended by Go 1.26 fuzzing's deadline race: no input saved, corpus re-run passed)")
  else
    status=1
    results+=("FAIL  $name ./$dir (input saved under ./$corpus)")
  fi
  rm -f "$log"
done
echo
printf '%s\n' "${results[@]}"
exit $status
