#!/usr/bin/env bash
# Gateway overhead: the router in front of a zero-latency emulated cluster vs
# the same load straight to one emulated instance, load generator on the same
# machine. Usage (from the repository root):
#   scripts/bench_gateway.sh DATA.jsonl [INDEX_DIR] [OUT_DIR]
# Env: N (requests per run, default 4000), CONCURRENCY (list, default "1 16 64"),
#      STREAM (1 to stream), BASE_PORT (default 18600), ADDR (default 127.0.0.1:18680).
set -euo pipefail
data=${1:?usage: scripts/bench_gateway.sh DATA.jsonl [INDEX_DIR] [OUT_DIR]}
index=${2:-}
out=${3:-out/gateway}
N=${N:-4000}
CONCURRENCY=${CONCURRENCY:-"1 16 64"}
BASE_PORT=${BASE_PORT:-18600}
ADDR=${ADDR:-127.0.0.1:18680}
mkdir -p "$out"
work=$(mktemp -d)
bin="$work/routebalance"
go build -o "$bin" ./cmd/routebalance
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

"$bin" emulate --zero-latency --base-port "$BASE_PORT" --cluster infra/clusters/reference-13.json >"$work/emulate.log" 2>&1 &
pids+=($!)
# The emulator must be ours: instance 0 serves the first tier's model (a port taken by another
# process would silently measure something else).
want=$(python3 -c 'import json;print(json.load(open("infra/clusters/reference-13.json"))["tiers"][0]["model"])')
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$BASE_PORT/v1/models" 2>/dev/null | grep -q "$want" && break; sleep 0.2; done
kill -0 "${pids[0]}" 2>/dev/null || { echo "emulator did not start (ports $BASE_PORT+ taken?):"; cat "$work/emulate.log"; exit 1; }
serve_args=(serve --allow-private-endpoints --data-dir "$work/data" --addr "$ADDR")
[ -n "$index" ] && serve_args+=(--index-dir "$index")
"$bin" "${serve_args[@]}" >"$work/serve.log" 2>&1 &
serve_pid=$!
pids+=($serve_pid)
B=http://$ADDR
for _ in $(seq 150); do curl -sf "$B/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
kill -0 "$serve_pid" 2>/dev/null || { echo "serve did not start ($ADDR taken?):"; cat "$work/serve.log"; exit 1; }
sleep 1
TOKEN=$(curl -s "$B/api/v1/signup" -H 'Content-Type: application/json' \
  -d '{"email":"bench@example.com","password":"correct-horse-42","name":"bench"}' | sed -E 's/.*"access_token":"([^"]+)".*/\1/')
AUTH="Authorization: Bearer $TOKEN"
CLUSTER=$(curl -s "$B/api/v1/clusters" -H "$AUTH" -d '{"name":"bench"}' | sed -E 's/.*"id":"([^"]+)".*/\1/')
# Register the 13 instances of the calibrated reference cluster, in file order.
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
stream=()
[ "${STREAM:-0}" = 1 ] && stream=(--stream)
for c in $CONCURRENCY; do
  echo "### concurrency $c"
  "$bin" bench --url "$B" --api-key "$KEY" --data "$data" --rate inf --max-concurrency "$c" --n "$N" \
    "${stream[@]}" --compare-url "http://127.0.0.1:$BASE_PORT" --router-pid "$serve_pid" \
    --cluster infra/clusters/reference-13.json --out "$out/gateway_c$c.json"
done
