#!/usr/bin/env bash
# Gateway speed: a zero-latency emulated cluster answered directly, through
# nginx (when installed) and through RouteBalance, with wrk posting real
# prompts; interleaved rounds, medians, ratios against direct.
#
# Usage (from the repository root):
#   scripts/bench_gateway.sh [DATA.jsonl] [INDEX_DIR] [OUT_DIR]
#
# DATA     labelled prompts (default ../shared/data/llmrouter/train.jsonl); the
#          index is built from the whole file unless INDEX_DIR is given, and
#          PROMPTS of its prompts (seeded sample) are the request bodies.
# INDEX_DIR an index written by `routebalance index build` (optional).
# OUT_DIR  results (default out/gateway): gateway.json, per-run logs.
#
# Targets, each run in every round in this order (the first target of a
# round rotates): direct (instance 0 of the emulator), nginx (proxy_pass with
# upstream keepalive, only when `nginx` is installed), rb-full (model auto,
# API key, routebalance policy, the index, metering on embedded SQLite),
# rb-noindex (the same without the index: quality priors), rb-full-pg /
# rb-noindex-pg (the same on Postgres, when DATABASE_URL answers), and
# bifrost (a Bifrost HTTP gateway you built yourself, only when BIFROST_BIN
# names its binary: started once, like nginx, in front of instance 0). Every
# RouteBalance target is a fresh `routebalance serve` per round on its own
# data, so only one gateway runs at a time.
#
# Per run: wrk at c=64 (req/s, gateway CPU per request from /proc of the
# gateway process, Go allocations per request from its /metrics, machine
# load), wrk at c=1 (p50/p99 latency, added p50 against direct of the same
# round), and for RouteBalance targets `routebalance bench --stream` at c=1
# with --compare-url (added streamed TTFT p99: the gateway's run, then the
# direct run) and an interleaved A/B of streamed TTFT (stream by stream,
# direct and gateway alternating, time to the first content token). After the rounds,
# `go test -bench InferenceOverhead -benchmem ./api/` reports in-process
# allocations per request. Needs wrk (apt-get install -y wrk nginx).
#
# Env: ROUNDS (default 3), DURATION (seconds per wrk run, default 10),
#      WARMUP (seconds, default 2), PROMPTS (default 500), STREAM_N (requests
#      per streamed run, default 400; 0 skips), STREAM_AB (pairs of the
#      interleaved streamed TTFT A/B per RouteBalance run: one stream direct,
#      one through the gateway, alternating, default 500; 0 skips), TARGETS (subset, space
#      separated), DATABASE_URL (Postgres for the -pg targets; default the test
#      database postgres://postgres@127.0.0.1:5432/test?sslmode=disable; PG=0
#      skips them), ALLOC_BENCH (default 1), BASE_PORT (emulator, default
#      18600), PORT (gateways, default 18680), BIN (a built routebalance binary
#      to use instead of building one; PORT+1 (nginx), PORT+2 (pprof) and
#      PORT+3 (the gateway's /metrics) are used too), PROFILE (a RouteBalance target, e.g.
#      rb-full: after the rounds, CPU and allocation profiles of it at c=64
#      through --pprof-addr, top lists printed, files in OUT_DIR), BASE_BIN
#      (another routebalance binary, e.g. built from an earlier commit: the
#      target rb-full-base is rb-full served by it, for a before/after
#      comparison within the same rounds; name it in TARGETS), BIFROST_BIN
#      (a Bifrost `bifrost-http` binary you built beside the project, see
#      docs/benchmarks.md §6; nothing of Bifrost is in this repository:
#      target bifrost on PORT+4, its
#      config.json written to the temporary work dir: one OpenAI-compatible
#      provider whose base URL is instance 0 with a placeholder key, no auth on
#      Bifrost's side, config store, logs store and request logging off; its
#      built-in telemetry plugin cannot be switched off and stays on, its
#      governance plugin fails to start without a config store and is not in
#      the request path; wrk posts model "openai/<instance 0's model>").
#      With bifrost and rb-full both measured the summary gives
#      rb-full / bifrost req/s per round, its median, both CPU per request
#      and the 1.2x verdict (Bifrost's allocations per request come from its
#      own /metrics on its main port).
set -euo pipefail
data=${1:-../shared/data/llmrouter/train.jsonl}
index=${2:-}
out=${3:-out/gateway}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
PROMPTS=${PROMPTS:-500}
STREAM_N=${STREAM_N:-400}
BASE_PORT=${BASE_PORT:-18600}
PORT=${PORT:-18680}
NGINX_PORT=$((PORT + 1))
BIFROST_PORT=$((PORT + 4))
PG=${PG:-1}
PGURL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
ALLOC_BENCH=${ALLOC_BENCH:-1}
command -v wrk >/dev/null || { echo "bench_gateway: wrk is not installed (apt-get install -y wrk nginx)" >&2; exit 1; }
[ -f "$data" ] || { echo "bench_gateway: no data file $data" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
bin=${BIN:-$work/routebalance}
pids=()
pgschema=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "$pgschema" ]; then
    for sc in "${pgschema}_f" "${pgschema}_n"; do psql -q "$PGURL" -c "DROP SCHEMA IF EXISTS $sc CASCADE" >/dev/null 2>&1 || true; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT
if [ -z "${BIN:-}" ]; then
  echo "bench_gateway: building" >&2
  go build -o "$bin" ./cmd/routebalance
fi
if [ -z "$index" ]; then
  echo "bench_gateway: building the index from the whole $data" >&2
  "$bin" index build --quiet --data "$data" --out "$work/index" >"$work/index.log" 2>&1 || { cat "$work/index.log"; exit 1; }
  index="$work/index"
fi

"$bin" emulate --zero-latency --base-port "$BASE_PORT" --cluster infra/clusters/reference-13.json >"$work/emulate.log" 2>&1 &
emu_pid=$!
pids+=($emu_pid)
want=$(python3 -c 'import json;print(json.load(open("infra/clusters/reference-13.json"))["tiers"][0]["model"])')
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$BASE_PORT/v1/models" 2>/dev/null | grep -q "$want" && break; sleep 0.2; done
kill -0 "$emu_pid" 2>/dev/null || { echo "emulator did not start (ports $BASE_PORT+ taken?):"; cat "$work/emulate.log"; exit 1; }

nginx_pid=""
if command -v nginx >/dev/null && [[ " ${TARGETS:-nginx} " == *" nginx "* ]]; then
  mkdir -p "$work/nginx/logs"
  cat >"$work/nginx/nginx.conf" <<EOF
worker_processes auto;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  upstream emu { server 127.0.0.1:$BASE_PORT; keepalive 128; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / {
      proxy_pass http://emu;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
EOF
  nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" >"$work/nginx/logs/stdout" 2>&1 &
  nginx_pid=$!
  pids+=($nginx_pid)
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$NGINX_PORT/v1/models" >/dev/null 2>&1 && break; sleep 0.1; done
  kill -0 "$nginx_pid" 2>/dev/null || { echo "nginx did not start:"; cat "$work/nginx/logs/"*; nginx_pid=""; }
fi

# Bifrost (optional): its bare proxy path to instance 0, started once.
bifrost_pid=""
if [ -z "${BIFROST_BIN:-}" ] && [[ " ${TARGETS:-} " == *" bifrost "* ]]; then
  echo "bench_gateway: target bifrost needs BIFROST_BIN (a Bifrost binary built beside the project): skipped" >&2
fi
if [ -n "${BIFROST_BIN:-}" ] && [[ " ${TARGETS:-bifrost} " == *" bifrost "* ]]; then
  [ -x "$BIFROST_BIN" ] || { echo "bench_gateway: BIFROST_BIN=$BIFROST_BIN is not an executable" >&2; exit 1; }
  mkdir -p "$work/bifrost"
  cat >"$work/bifrost/config.json" <<EOF
{
  "\$schema": "https://www.getbifrost.ai/schema",
  "client": {
    "enable_logging": false,
    "disable_content_logging": true,
    "enforce_auth_on_inference": false,
    "allow_direct_keys": false,
    "drop_excess_requests": false
  },
  "config_store": {"enabled": false},
  "logs_store": {"enabled": false},
  "providers": {
    "openai": {
      "keys": [{"name": "emulator", "value": "not-checked", "models": [], "weight": 1.0}],
      "network_config": {"base_url": "http://127.0.0.1:$BASE_PORT", "default_request_timeout_in_seconds": 30, "max_retries": 0},
      "concurrency_and_buffer_size": {"concurrency": 1000, "buffer_size": 5000}
    }
  }
}
EOF
  (cd "$work/bifrost" && exec "$BIFROST_BIN" -host 127.0.0.1 -port "$BIFROST_PORT" -app-dir "$work/bifrost" \
    -log-level error >"$work/bifrost/stdout.log" 2>&1) &
  bifrost_pid=$!
  pids+=($bifrost_pid)
  for _ in $(seq 150); do curl -sf "http://127.0.0.1:$BIFROST_PORT/health" >/dev/null 2>&1 && break; sleep 0.2; done
  # a chat completion through it must come back 200 with the emulator's answer
  if ! python3 - "$BIFROST_PORT" "$BASE_PORT" "$want" <<'PY'
import json, sys, urllib.error, urllib.request
bp, ep, model = sys.argv[1], sys.argv[2], sys.argv[3]
def ask(port, m):
    body = json.dumps({'model': m, 'messages': [{'role': 'user', 'content': 'What is 2+2?'}]}).encode()
    req = urllib.request.Request(f'http://127.0.0.1:{port}/v1/chat/completions', data=body, headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        sys.exit(f'status {e.code} from port {port}: {e.read()[:400]!r}')
st, b = ask(bp, 'openai/' + model)
_, d = ask(ep, model)
# the emulator's text differs from call to call (drawn lengths); its prompt
# token count for the same messages does not
got = b['choices'][0]['message']['content']
ok = st == 200 and isinstance(got, str) and got != '' and b['usage']['prompt_tokens'] == d['usage']['prompt_tokens']
if not ok:
    sys.exit(f'unexpected answer: status {st}: {json.dumps(b)[:400]}')
print(f'bench_gateway: bifrost answers 200 with the emulator\'s completion ({len(got)} chars, '
      f'{b["usage"]["prompt_tokens"]} prompt tokens as direct, model {b.get("model")})', file=sys.stderr)
PY
  then
    echo "bench_gateway: bifrost did not proxy a chat completion; its log:" >&2
    tail -20 "$work/bifrost/stdout.log" >&2
    exit 1
  fi
fi

# setup_rb NAME SERVE_ARGS...: a data dir with a tenant, the 13 instances, an
# API key; leaves NAME.key and NAME.args in $work. The server is stopped after.
setup_rb() {
  local name=$1
  shift
  "$bin" serve --allow-private-endpoints --addr "127.0.0.1:$PORT" "$@" >"$work/$name.setup.log" 2>&1 &
  local sp=$!
  local B=http://127.0.0.1:$PORT
  for _ in $(seq 150); do curl -sf "$B/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
  kill -0 "$sp" 2>/dev/null || { echo "serve ($name) did not start (port $PORT taken?):"; cat "$work/$name.setup.log"; exit 1; }
  local TOKEN AUTH CLUSTER
  TOKEN=$(curl -s "$B/api/v1/signup" -H 'Content-Type: application/json' \
    -d '{"email":"bench@example.com","password":"correct-horse-42","name":"bench"}' | sed -E 's/.*"access_token":"([^"]+)".*/\1/')
  AUTH="Authorization: Bearer $TOKEN"
  CLUSTER=$(curl -s "$B/api/v1/clusters" -H "$AUTH" -d '{"name":"bench","policy":{"name":"routebalance"}}' | sed -E 's/.*"id":"([^"]+)".*/\1/')
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
PY
  curl -s "$B/api/v1/keys" -H "$AUTH" -d '{"name":"bench"}' | sed -E 's/.*"key":"([^"]+)".*/\1/' >"$work/$name.key"
  kill "$sp"
  wait "$sp" 2>/dev/null || true
  printf '%s\n' "$@" >"$work/$name.args"
}

want_target() { [ -z "${TARGETS:-}" ] || [[ " $TARGETS " == *" $1 "* ]]; }
rb=()
if want_target rb-full; then setup_rb rb-full --data-dir "$work/full" --index-dir "$index"; rb+=(rb-full); fi
if want_target rb-noindex; then setup_rb rb-noindex --data-dir "$work/noindex"; rb+=(rb-noindex); fi
if want_target rb-full-base; then
  [ -n "${BASE_BIN:-}" ] || { echo "bench_gateway: rb-full-base needs BASE_BIN (the routebalance binary to compare with)" >&2; exit 1; }
  setup_rb rb-full-base --data-dir "$work/full-base" --index-dir "$index"; rb+=(rb-full-base)
fi
if [ "$PG" = 1 ] && { want_target rb-full-pg || want_target rb-noindex-pg; }; then
  if psql -q "$PGURL" -c 'select 1' >/dev/null 2>&1; then
    pgschema=bench_gw_$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
    sep='?'; [[ "$PGURL" == *\?* ]] && sep='&'
    if want_target rb-full-pg; then
      psql -q "$PGURL" -c "CREATE SCHEMA ${pgschema}_f" >/dev/null
      setup_rb rb-full-pg --data-dir "$work/full-pg" --index-dir "$index" --database-url "$PGURL${sep}search_path=${pgschema}_f"; rb+=(rb-full-pg)
    fi
    if want_target rb-noindex-pg; then
      psql -q "$PGURL" -c "CREATE SCHEMA ${pgschema}_n" >/dev/null
      setup_rb rb-noindex-pg --data-dir "$work/noindex-pg" --database-url "$PGURL${sep}search_path=${pgschema}_n"; rb+=(rb-noindex-pg)
    fi
  else
    echo "bench_gateway: Postgres at DATABASE_URL does not answer: skipping the -pg targets" >&2
  fi
fi

targets=()
want_target direct && targets+=(direct)
[ -n "$nginx_pid" ] && targets+=(nginx)
[ -n "$bifrost_pid" ] && targets+=(bifrost)
targets+=("${rb[@]}")
python3 scripts/bench_gateway.py --bin "$bin" --work "$work" --out "$out" --data "$data" \
  --emulator-pid "$emu_pid" --base-port "$BASE_PORT" --port "$PORT" --nginx-port "$NGINX_PORT" \
  --nginx-pid "${nginx_pid:-0}" --bifrost-port "$BIFROST_PORT" --bifrost-pid "${bifrost_pid:-0}" --direct-model "$want" --rounds "$ROUNDS" --duration "$DURATION" \
  --warmup "$WARMUP" --prompts "$PROMPTS" --stream-n "$STREAM_N" --stream-ab "${STREAM_AB:-500}" --targets "${targets[*]}" \
  --profile "${PROFILE:-}" --base-bin "${BASE_BIN:-}"

if [ "$ALLOC_BENCH" = 1 ]; then
  echo
  echo "### in-process allocations per request (go test -bench InferenceOverhead -benchmem ./api/)"
  go test -run '^$' -bench 'InferenceOverhead/(direct|routed)$' -benchmem -benchtime 3000x ./api/ \
    | tee "$out/alloc_bench.txt" | grep -E '^Benchmark' || true
  python3 - "$out/alloc_bench.txt" <<'PY'
import re, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r'BenchmarkInferenceOverhead/(\S+?)(-\d+)?\s+\d+\s+([\d.]+) ns/op\s+([\d.]+) B/op\s+([\d.]+) allocs/op', line)
    if m:
        rows[m.group(1)] = (float(m.group(3)), float(m.group(4)), float(m.group(5)))
if 'direct' in rows and 'routed' in rows:
    d, r = rows['direct'], rows['routed']
    print(f"gateway in-process (routed - direct): {r[2]-d[2]:.0f} allocs/request, {r[1]-d[1]:.0f} B/request "
          f"(routed {r[2]:.0f}, direct {d[2]:.0f}: the client and the fake upstream run in the same process)")
PY
fi
