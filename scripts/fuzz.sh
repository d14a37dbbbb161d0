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
# when any target failed. docs/fuzzing.md records the runs.
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

status=0
results=()
for t in "${targets[@]}"; do
  read -r dir name <<<"$t"
  echo "=== $name (./$dir) for $fuzztime"
  log=$(mktemp)
  if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -parallel "$workers" "./$dir" 2>&1 | tee "$log"; then
    execs=$(grep -oE 'execs: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || echo "?")
    results+=("ok    $name ./$dir $fuzztime, ${execs} execs")
  else
    status=1
    results+=("FAIL  $name ./$dir (input saved under ./$dir/testdata/fuzz/$name)")
  fi
  rm -f "$log"
done
echo
printf '%s\n' "${results[@]}"
exit $status
