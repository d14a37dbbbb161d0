#!/usr/bin/env bash
# Herding for real: R `serve` replicas (one Postgres schema, one Redis prefix,
# the same secrets) in front of ONE emulated calibrated reference-13 cluster
# in real time, Poisson load spread round-robin over the replicas by
# `routebalance bench`. Each arm gets fresh replicas and a fresh schema, so
# no routing state carries over. An arm is R (the owner lease on: one
# replica schedules the cluster, the others forward to it) or R:nolease
# (--owner-lease=false: every replica schedules what it receives). The
# summary at the end gives each arm's mean E2E and its ratio to the first
# arm. Usage (from the repository root):
#   scripts/bench_replicas.sh DATA.jsonl INDEX_DIR [OUT_DIR]
# Env: REPLICAS (arms, default "1 3:nolease 3"), RATE (default 24), N (default 1200),
#      DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test?sslmode=disable),
#      REDIS_URL (default redis://127.0.0.1:6379/0), BASE_PORT (default 18700), ADDR_PORT (default 18780;
#      replica k listens on ADDR_PORT+k, its /metrics on ADDR_PORT+50+k).
set -euo pipefail
data=${1:?usage: scripts/bench_replicas.sh DATA.jsonl INDEX_DIR [OUT_DIR]}
index=${2:?usage: scripts/bench_replicas.sh DATA.jsonl INDEX_DIR [OUT_DIR]}
out=${3:-out/replicas}
REPLICAS=${REPLICAS:-"1 3:nolease 3"}
RATE=${RATE:-24}
N=${N:-1200}
DB=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
REDIS=${REDIS_URL:-redis://127.0.0.1:6379/0}
BASE_PORT=${BASE_PORT:-18700}
ADDR_PORT=${ADDR_PORT:-18780}
mkdir -p "$out"
work=$(mktemp -d)
bin="$work/routebalance"
go build -o "$bin" ./cmd/routebalance
pids=()
schemas=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for s in "${schemas[@]}"; do psql -q "$DB" -c "DROP SCHEMA IF EXISTS $s CASCADE" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

"$bin" emulate --base-port "$BASE_PORT" --cluster infra/clusters/reference-13.json >"$work/emulate.log" 2>&1 &
pids+=($!)
want=$(python3 -c 'import json;print(json.load(open("infra/clusters/reference-13.json"))["tiers"][0]["model"])')
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$BASE_PORT/v1/models" 2>/dev/null | grep -q "$want" && break; sleep 0.2; done
kill -0 "${pids[0]}" 2>/dev/null || { echo "emulator did not start (ports $BASE_PORT+ taken?):"; cat "$work/emulate.log"; exit 1; }

secret=$(openssl rand -hex 32)
enc=$(openssl rand -hex 32)
for armspec in $REPLICAS; do
  r=${armspec%%:*}
  mode=lease
  lease=true
  case "$armspec" in *:nolease) mode=nolease; lease=false;; esac
  arm_name="r$r-$mode"
  schema="rbbench_$(openssl rand -hex 4)"
  schemas+=("$schema")
  psql -q "$DB" -c "CREATE SCHEMA $schema" >/dev/null
  sep='?'; case "$DB" in *\?*) sep='&';; esac
  url="$DB${sep}search_path=$schema"
  prefix="rbbench:$schema"
  bases=()
  arm=()
  for k in $(seq 0 $((r - 1))); do
    addr="127.0.0.1:$((ADDR_PORT + k))"
    maddr="127.0.0.1:$((ADDR_PORT + 50 + k))"
    "$bin" serve --allow-private-endpoints --data-dir "$work/data-$arm_name-$k" --addr "$addr" --database-url "$url" \
      --redis-url "$REDIS" --redis-prefix "$prefix" --jwt-secret "$secret" --encryption-key "$enc" \
      --index-dir "$index" "--owner-lease=$lease" --replica-id "replica-$k" --metrics-addr "$maddr" >"$work/serve-$arm_name-$k.log" 2>&1 &
    pids+=($!)
    arm+=($!)
    bases+=("http://$addr")
    for _ in $(seq 150); do curl -sf "http://$addr/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
    kill -0 "${arm[-1]}" 2>/dev/null || { echo "serve did not start ($addr):"; cat "$work/serve-$arm_name-$k.log"; exit 1; }
  done
  B=${bases[0]}
  TOKEN=$(curl -s "$B/api/v1/signup" -H 'Content-Type: application/json' \
    -d '{"email":"bench@example.com","password":"correct-horse-42","name":"bench"}' | sed -E 's/.*"access_token":"([^"]+)".*/\1/')
  AUTH="Authorization: Bearer $TOKEN"
  CLUSTER=$(curl -s "$B/api/v1/clusters" -H "$AUTH" -d '{"name":"bench"}' | sed -E 's/.*"id":"([^"]+)".*/\1/')
  python3 - "$B" "$AUTH" "$CLUSTER" "$BASE_PORT" <<'PY'
import json, sys, urllib.request
b, auth, cluster, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
c = json.load(open('infra/clusters/reference-13.json'))
k = 0
for t in c['tiers']:
    for _ in range(t['instances']):
        body = {"base_url": f"http://127.0.0.1:{port+k}", "model": t['model'], "gpu": t['gpu'],
                "tensor_parallel": t['tensor_parallel'], "price_in_per_mtok": t['price_in_per_mtok'],
                "price_out_per_mtok": t['price_out_per_mtok'], "max_concurrency": t['max_num_seqs']}
        req = urllib.request.Request(f"{b}/api/v1/clusters/{cluster}/instances", data=json.dumps(body).encode(),
                                     headers={"Authorization": auth.split(": ",1)[1], "Content-Type": "application/json"})
        urllib.request.urlopen(req).read()
        k += 1
print(f"registered {k} instances", file=sys.stderr)
PY
  KEY=$(curl -s "$B/api/v1/keys" -H "$AUTH" -d '{"name":"bench"}' | sed -E 's/.*"key":"([^"]+)".*/\1/')
  sleep 1
  urls=$(IFS=,; echo "${bases[*]}")
  echo "### $r replica(s), owner lease $lease: $urls"
  "$bin" bench --url "$urls" --api-key "$KEY" --data "$data" --rate "$RATE" --n "$N" --stream \
    --preset balanced --cluster infra/clusters/reference-13.json --out "$out/replicas_$arm_name.json"
  # Who decided and who forwarded (routing/owner): each replica's counters.
  for k in $(seq 0 $((r - 1))); do
    m=$(curl -s "http://127.0.0.1:$((ADDR_PORT + 50 + k))/metrics" | grep -E '^routebalance_(forward_[a-z_]+_total|owner_leases_held|decision_duration_seconds_count)' | awk '{print $1"="$2}' | tr '\n' ' ')
    echo "replica-$k: $m"
  done
  for p in "${arm[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${arm[@]}"; do wait "$p" 2>/dev/null || true; done
done
python3 - "$out" $REPLICAS <<'PY'
import json, sys
out, arms = sys.argv[1], sys.argv[2:]
base = None
print("arm                 served  mean E2E (s)  p99 E2E (s)  vs first arm")
for a in arms:
    r, _, mode = a.partition(":")
    name = f"r{r}-{mode or 'lease'}"
    s = json.load(open(f"{out}/replicas_{name}.json"))["router"]["summary"]
    mean = s["e2el_ms"]["mean"] / 1000
    base = base or mean
    print(f"{name:18s} {s['completed']:7d}  {mean:12.3f}  {s['e2el_ms']['p99']/1000:11.3f}  {mean/base:6.3f}")
PY
