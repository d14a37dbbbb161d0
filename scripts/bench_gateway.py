#!/usr/bin/env python3
"""Interleaved rounds of the gateway benchmark; scripts/bench_gateway.sh sets
up the emulator, nginx, Bifrost (BIFROST_BIN) and the RouteBalance data
directories and calls this.

Every round runs every target once (the first target rotates from round to
round): wrk at c=64 and at c=1 posting the same prompts, and for RouteBalance
targets a streamed `routebalance bench` at c=1 against the target and the
emulator. Results are the medians over rounds of per-round values, ratios are
taken within a round (target / direct of the same round) before the median.
"""
import argparse
import gc
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

CLK_TCK = os.sysconf('SC_CLK_TCK')

LUA = r'''
local prompts = {
%s
}
local reqs = {}
local n = 0
local i = 0
function init(args)
  local model = os.getenv("RB_MODEL") or "auto"
  local key = os.getenv("RB_KEY") or ""
  local headers = {["Content-Type"] = "application/json"}
  if key ~= "" then headers["Authorization"] = "Bearer " .. key end
  for k, p in ipairs(prompts) do
    local body = '{"model":"' .. model .. '","messages":[{"role":"user","content":' .. p .. '}]}'
    reqs[k] = wrk.format("POST", "/v1/chat/completions", headers, body)
  end
  n = #reqs
  i = math.random(n)
end
function request()
  i = i %% n + 1
  return reqs[i]
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RBJSON {"requests":%%d,"duration_us":%%d,"bytes":%%d,"connect":%%d,"read":%%d,"write":%%d,"status":%%d,"timeout":%%d,"p50_us":%%d,"p90_us":%%d,"p99_us":%%d,"mean_us":%%.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean))
end
'''


def write_prompts(data, n, work):
    """Samples n prompts (seed 1) from data; writes the wrk script and a JSONL for bench."""
    items = [json.loads(l) for l in open(data) if l.strip()]
    random.Random(1).shuffle(items)
    items = items[:n]
    lines = []
    for it in items:
        s = json.dumps(it['prompt'], ensure_ascii=True)
        lvl = 1
        while (']' + '=' * lvl + ']') in s:
            lvl += 1
        lines.append('[' + '=' * lvl + '[' + s + ']' + '=' * lvl + '],')
    lua = os.path.join(work, 'prompts.lua')
    with open(lua, 'w') as f:
        f.write(LUA % '\n'.join(lines))
    jl = os.path.join(work, 'prompts.jsonl')
    with open(jl, 'w') as f:
        for it in items:
            f.write(json.dumps({'id': it['id'], 'prompt': it['prompt']}) + '\n')
    mean = statistics.mean(len(it['prompt']) for it in items)
    return lua, jl, len(items), mean


def children(pid):
    out = []
    try:
        for t in os.listdir(f'/proc/{pid}/task'):
            with open(f'/proc/{pid}/task/{t}/children') as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def cpu_ticks(pids):
    total = 0
    for p in pids:
        try:
            with open(f'/proc/{p}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            pass
    return total


def machine_ticks():
    with open('/proc/stat') as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v[:8]), idle


def loadavg():
    with open('/proc/loadavg') as f:
        return float(f.read().split()[0])


def metrics_port(a):
    """The gateway's /metrics listener (serve --metrics-addr; /metrics is not on the main listener)."""
    return a.port + 3


def go_mallocs(port):
    try:
        body = urllib.request.urlopen(f'http://127.0.0.1:{port}/metrics', timeout=5).read().decode()
    except OSError:
        return None
    m = {}
    for line in body.splitlines():
        if line.startswith('go_memstats_mallocs_total ') or line.startswith('go_memstats_alloc_bytes_total '):
            k, v = line.split()
            m[k] = float(v)
    return m


def run_wrk(lua, port, conc, dur, env, gateway_pids, emulator_pid, log):
    threads = 1 if conc == 1 else 2
    cmd = ['wrk', '-t', str(threads), '-c', str(conc), '-d', f'{max(1, round(dur))}s', '--timeout', '10s', '-s', lua,
           f'http://127.0.0.1:{port}']
    g0 = cpu_ticks(gateway_pids) if gateway_pids else 0
    e0 = cpu_ticks([emulator_pid])
    m0 = machine_ticks()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, **env}, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    m1 = machine_ticks()
    g1 = cpu_ticks(gateway_pids) if gateway_pids else 0
    e1 = cpu_ticks([emulator_pid])
    log.write(' '.join(cmd) + '\n' + out + '\n')
    if p.returncode != 0:
        raise RuntimeError(f'wrk failed ({p.returncode}): {out}')
    res = None
    for line in out.splitlines():
        if line.startswith('RBJSON '):
            res = json.loads(line[7:])
    if res is None:
        raise RuntimeError(f'no wrk summary: {out}')
    secs = res['duration_us'] / 1e6
    busy = (m1[0] - m0[0]) - (m1[1] - m0[1])
    wrk_ticks = (ru.ru_utime + ru.ru_stime) * CLK_TCK
    ours = (g1 - g0) + (e1 - e0) + wrk_ticks
    res.update({
        'req_per_s': res['requests'] / secs,
        'errors': res['connect'] + res['read'] + res['write'] + res['status'] + res['timeout'],
        'gateway_cpu_ms_per_req': ((g1 - g0) / CLK_TCK * 1000 / res['requests']) if gateway_pids else None,
        'emulator_cpu_ms_per_req': (e1 - e0) / CLK_TCK * 1000 / res['requests'],
        'wrk_cpu_ms_per_req': wrk_ticks / CLK_TCK * 1000 / res['requests'],
        'machine_busy_cores': busy / CLK_TCK / secs,
        'other_busy_cores': max(0.0, (busy - ours) / CLK_TCK / secs),
        'loadavg1': loadavg(),
    })
    return res


class RB:
    """One `routebalance serve` for one round."""

    def __init__(self, a, name):
        self.a, self.name = a, name
        self.args = open(os.path.join(a.work, name + '.args')).read().split('\n')[:-1]
        self.key = open(os.path.join(a.work, name + '.key')).read().strip()
        self.bin = a.base_bin if name.endswith('-base') else a.bin
        self.proc = None

    def start(self, rnd, extra=()):
        log = open(os.path.join(self.a.out, f'{self.name}.r{rnd}.serve.log'), 'w')
        self.proc = subprocess.Popen([self.bin, 'serve', '--allow-private-endpoints', '--addr',
                                      f'127.0.0.1:{self.a.port}', '--metrics-addr', f'127.0.0.1:{metrics_port(self.a)}']
                                     + self.args + list(extra), stdout=log, stderr=log)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f'serve {self.name} exited; see {log.name}')
            try:
                urllib.request.urlopen(f'http://127.0.0.1:{self.a.port}/healthz', timeout=1).read()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f'serve {self.name} did not start')

    def probe(self, model):
        body = json.dumps({'model': 'auto', 'messages': [{'role': 'user', 'content': 'What is 2+2?'}]}).encode()
        req = urllib.request.Request(f'http://127.0.0.1:{self.a.port}/v1/chat/completions', data=body,
                                     headers={'Authorization': 'Bearer ' + self.key, 'Content-Type': 'application/json'})
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
            return r.headers.get('X-RouteBalance-Model'), r.headers.get('X-RouteBalance-Policy')

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def stream_ttft(a, key, prompts_jsonl, rnd, name):
    outf = os.path.join(a.out, f'{name}.r{rnd}.stream.json')
    cmd = [a.bin, 'bench', '--url', f'http://127.0.0.1:{a.port}', '--api-key', key, '--data', prompts_jsonl,
           '--rate', 'inf', '--max-concurrency', '1', '--n', str(a.stream_n), '--stream',
           '--compare-url', f'http://127.0.0.1:{a.base_port}', '--out', outf]
    with open(os.path.join(a.out, f'{name}.r{rnd}.stream.log'), 'w') as log:
        subprocess.run(cmd, stdout=log, stderr=log, check=True)
    r = json.load(open(outf))
    o = r['overhead']
    return {'ttft_p99_added_ms': o['ttft_p99_ms'], 'ttft_p50_added_ms': o['ttft_p50_ms'],
            'stream_router_ttft_p99_ms': r['router']['summary']['ttft_ms']['p99'] if 'summary' in r['router'] else None}


class Streamer:
    """One keep-alive connection that posts streamed chat completions and
    times the first content token (the first SSE event whose delta carries
    text), then reads the stream to its end."""

    def __init__(self, port, model, key):
        self.conn = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
        self.model = model
        self.headers = {'Content-Type': 'application/json'}
        if key:
            self.headers['Authorization'] = 'Bearer ' + key

    def ttft(self, prompt):
        body = json.dumps({'model': self.model, 'stream': True, 'messages': [{'role': 'user', 'content': prompt}]})
        t0 = time.perf_counter_ns()
        self.conn.request('POST', '/v1/chat/completions', body=body, headers=self.headers)
        r = self.conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f'streamed request: status {r.status}: {r.read()[:300]!r}')
        first = None
        while True:
            line = r.readline()
            if not line:
                break
            if first is None and line.startswith(b'data: {') and b'"content":"' in line:
                ev = json.loads(line[6:])
                if any((c.get('delta') or {}).get('content') for c in ev.get('choices', [])):
                    first = time.perf_counter_ns()
            if line.startswith(b'data: [DONE]'):
                r.read()  # the chunked body's end: the connection is reused
                break
        if first is None:
            raise RuntimeError('stream ended without a content token')
        return (first - t0) / 1e6


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def stream_ab(a, key, prompts, n):
    """Paired, interleaved streamed TTFT: n streams straight to emulated
    instance 0 and n through the gateway, alternating one by one (which of
    the two goes first alternates too), so both see the same machine.
    Client: Python http.client on one keep-alive connection per side, GC off."""
    d = Streamer(a.base_port, a.direct_model, '')
    g = Streamer(a.port, 'auto', key)
    for i in range(20):  # warm both connections and the gateway
        d.ttft(prompts[i % len(prompts)])
        g.ttft(prompts[i % len(prompts)])
    dt, gt = [], []
    gc.disable()
    try:
        for i in range(n):
            p = prompts[i % len(prompts)]
            if i % 2:
                dt.append(d.ttft(p))
                gt.append(g.ttft(p))
            else:
                gt.append(g.ttft(p))
                dt.append(d.ttft(p))
    finally:
        gc.enable()
    diffs = [x - y for x, y in zip(gt, dt)]
    return {'ab_direct_ttft_p50_ms': pct(dt, 0.5), 'ab_direct_ttft_p99_ms': pct(dt, 0.99),
            'ab_rb_ttft_p50_ms': pct(gt, 0.5), 'ab_rb_ttft_p99_ms': pct(gt, 0.99),
            'ab_ttft_p50_added_ms': pct(gt, 0.5) - pct(dt, 0.5), 'ab_ttft_p99_added_ms': pct(gt, 0.99) - pct(dt, 0.99),
            'ab_paired_diff_p50_ms': pct(diffs, 0.5)}


def profile(a, rb, lua, log):
    """CPU and allocation profiles of one target at c=64 (--profile)."""
    pport = a.port + 2
    rb.start('prof', ['--pprof-addr', f'127.0.0.1:{pport}'])
    try:
        env = {'RB_MODEL': 'auto', 'RB_KEY': rb.key}
        run_wrk(lua, a.port, 64, a.warmup, env, [rb.proc.pid], a.emulator_pid, log)
        secs = max(1, round(a.duration))
        cpu = os.path.join(a.out, f'{rb.name}.cpu.pprof')
        allocs = os.path.join(a.out, f'{rb.name}.allocs.pprof')
        base = f'http://127.0.0.1:{pport}/debug/pprof'
        a0 = urllib.request.urlopen(f'{base}/allocs', timeout=30).read()
        fetch = subprocess.Popen(['curl', '-sf', '-o', cpu, f'{base}/profile?seconds={secs}'])
        res = run_wrk(lua, a.port, 64, secs, env, [rb.proc.pid], a.emulator_pid, log)
        fetch.wait()
        open(allocs + '.base', 'wb').write(a0)
        subprocess.run(['curl', '-sf', '-o', allocs, f'{base}/allocs'], check=True)
        print(f'profile of {rb.name} at c=64 ({res["req_per_s"]:.0f} req/s): {cpu}, {allocs} (diff_base {allocs}.base)')
        for args in (['-top', '-nodecount=35', cpu], ['-top', '-cum', '-nodecount=45', cpu],
                     ['-top', '-nodecount=30', '-sample_index=alloc_objects', '-diff_base', allocs + '.base', allocs]):
            r = subprocess.run(['go', 'tool', 'pprof'] + args, capture_output=True, text=True)
            print(r.stdout[-6000:])
    finally:
        rb.stop()


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def round_ratios(rows, num, den):
    """[(round, req/s of num / req/s of den at c=64)] over the rounds that ran both."""
    d = {r['round']: r['c64']['req_per_s'] for r in rows if r['target'] == den}
    return [(r['round'], r['c64']['req_per_s'] / d[r['round']]) for r in rows
            if r['target'] == num and d.get(r['round'])]


def fmt(v, nd=2):
    if v is None:
        return '—'
    if abs(v) >= 1000:
        return f'{v:,.0f}'
    return f'{v:.{nd}f}'


def main():
    ap = argparse.ArgumentParser()
    for k in ['bin', 'work', 'out', 'data', 'direct-model', 'targets']:
        ap.add_argument('--' + k, required=True)
    for k in ['emulator-pid', 'base-port', 'port', 'nginx-port', 'nginx-pid', 'rounds', 'prompts', 'stream-n']:
        ap.add_argument('--' + k, type=int, required=True)
    ap.add_argument('--bifrost-port', type=int, default=0, help='a running Bifrost in front of instance 0 (target bifrost)')
    ap.add_argument('--bifrost-pid', type=int, default=0)
    ap.add_argument('--stream-ab', type=int, default=0, help='pairs of the interleaved streamed TTFT A/B per RouteBalance run')
    ap.add_argument('--duration', type=float, required=True)
    ap.add_argument('--warmup', type=float, required=True)
    ap.add_argument('--base-bin', default='', help='routebalance binary serving the *-base targets')
    ap.add_argument('--profile', default='', help='also profile this RouteBalance target at c=64 after the rounds')
    a = ap.parse_args()
    targets = a.targets.split()
    lua, pj, n, mean_chars = write_prompts(a.data, a.prompts, a.work)
    prompts = [json.loads(l)['prompt'] for l in open(pj)]
    print(f'bench_gateway: {n} prompts from {a.data} (mean {mean_chars:.0f} chars), {a.rounds} rounds × '
          f'{len(targets)} targets ({", ".join(targets)}), wrk {a.duration:g} s per run, {os.cpu_count()} cores')
    log = open(os.path.join(a.out, 'wrk.log'), 'w')
    rbs = {t: RB(a, t) for t in targets if t.startswith('rb-')}
    rows = []  # one dict per (round, target)
    for rnd in range(a.rounds):
        order = targets[rnd % len(targets):] + targets[:rnd % len(targets)]
        print(f'--- round {rnd + 1}/{a.rounds} (load average {loadavg():.2f})', flush=True)
        for t in order:
            env, gw, port = {}, [], None
            rb = rbs.get(t)
            if t == 'direct':
                port, env = a.base_port, {'RB_MODEL': a.direct_model}
            elif t == 'nginx':
                port, env = a.nginx_port, {'RB_MODEL': a.direct_model}
                gw = [a.nginx_pid] + children(a.nginx_pid)
            elif t == 'bifrost':
                # Bifrost routes on "<provider>/<model>"; its provider "openai" is instance 0
                port, env = a.bifrost_port, {'RB_MODEL': 'openai/' + a.direct_model}
                gw = [a.bifrost_pid] + children(a.bifrost_pid)
            else:
                rb.start(rnd)
                port, env = a.port, {'RB_MODEL': 'auto', 'RB_KEY': rb.key}
                gw = [rb.proc.pid]
            try:
                probe = rb.probe(a.direct_model) if rb else None
                if a.warmup > 0:
                    run_wrk(lua, port, 64, a.warmup, env, gw, a.emulator_pid, log)
                # Go allocations from the gateway's /metrics: RouteBalance's own listener,
                # Bifrost's main port (its telemetry plugin exports the Go collector)
                mport = metrics_port(a) if rb else (a.bifrost_port if t == 'bifrost' else None)
                m0 = go_mallocs(mport) if mport else None
                hi = run_wrk(lua, port, 64, a.duration, env, gw, a.emulator_pid, log)
                m1 = go_mallocs(mport) if mport else None
                lo = run_wrk(lua, port, 1, a.duration, env, gw, a.emulator_pid, log)
                row = {'round': rnd + 1, 'target': t, 'c64': hi, 'c1': lo}
                if m0 and m1:
                    # the scrape between the two readings is one extra request; negligible
                    row['allocs_per_req'] = (m1['go_memstats_mallocs_total'] - m0['go_memstats_mallocs_total']) / hi['requests']
                    row['alloc_bytes_per_req'] = (m1['go_memstats_alloc_bytes_total'] - m0['go_memstats_alloc_bytes_total']) / hi['requests']
                if rb and a.stream_n > 0:
                    row.update(stream_ttft(a, rb.key, pj, rnd, t))
                if rb and a.stream_ab > 0:
                    row.update(stream_ab(a, rb.key, prompts, a.stream_ab))
                if probe:
                    row['probe'] = probe
            finally:
                if rb:
                    rb.stop()
            rows.append(row)
            errs = hi['errors'] + lo['errors']
            print(f'  {t:14s} c64 {hi["req_per_s"]:8.0f} req/s  c1 p50 {lo["p50_us"] / 1000:6.3f} ms'
                  f'  cpu/req {fmt(hi["gateway_cpu_ms_per_req"], 3):>6s} ms'
                  f'  allocs/req {fmt(row.get("allocs_per_req"), 0):>6s}'
                  f'  ttft p99 added {fmt(row.get("ttft_p99_added_ms"), 3):>6s} ms'
                  f' (A/B {fmt(row.get("ab_ttft_p99_added_ms"), 3)})'
                  f'  other load {hi["other_busy_cores"]:.2f} cores' + (f'  ERRORS {errs}' if errs else '')
                  + (f'  (probe: {probe[0]}, {probe[1]})' if probe else ''), flush=True)

    if a.profile:
        profile(a, rbs[a.profile], lua, log)

    # per-round ratios against direct of the same round
    direct = {r['round']: r for r in rows if r['target'] == 'direct'}
    summary = {}
    for t in targets:
        rs = [r for r in rows if r['target'] == t]
        ratio = [r['c64']['req_per_s'] / direct[r['round']]['c64']['req_per_s'] for r in rs if r['round'] in direct]
        added = [(r['c1']['p50_us'] - direct[r['round']]['c1']['p50_us']) / 1000 for r in rs if r['round'] in direct]
        summary[t] = {
            'req_per_s_c64': med([r['c64']['req_per_s'] for r in rs]),
            'ratio_vs_direct_c64': med(ratio) if t != 'direct' else 1.0,
            'ratio_vs_direct_c64_rounds': ratio,
            'p50_ms_c1': med([r['c1']['p50_us'] / 1000 for r in rs]),
            'p99_ms_c1': med([r['c1']['p99_us'] / 1000 for r in rs]),
            'added_p50_ms_c1': med(added) if t != 'direct' else None,
            'gateway_cpu_ms_per_req_c64': med([r['c64']['gateway_cpu_ms_per_req'] for r in rs]),
            'gateway_cpu_ms_per_req_c1': med([r['c1']['gateway_cpu_ms_per_req'] for r in rs]),
            'allocs_per_req': med([r.get('allocs_per_req') for r in rs]),
            'alloc_bytes_per_req': med([r.get('alloc_bytes_per_req') for r in rs]),
            'ttft_p99_added_ms': med([r.get('ttft_p99_added_ms') for r in rs]),
            'ttft_p50_added_ms': med([r.get('ttft_p50_added_ms') for r in rs]),
            **{k: med([r.get(k) for r in rs]) for k in ['ab_ttft_p50_added_ms', 'ab_ttft_p99_added_ms', 'ab_paired_diff_p50_ms',
                                                        'ab_direct_ttft_p99_ms', 'ab_rb_ttft_p99_ms']},
            'errors': sum(r['c64']['errors'] + r['c1']['errors'] for r in rs),
            'other_busy_cores': med([r['c64']['other_busy_cores'] for r in rs]),
            'loadavg1': med([r['c64']['loadavg1'] for r in rs]),
        }
    print()
    print(f'### medians of {a.rounds} interleaved rounds ({n} prompts, mean {mean_chars:.0f} chars; '
          f'load average {loadavg():.2f} now; "other" = cores busy outside the benchmark during c=64 runs)')
    print('| target | req/s c=64 | × direct | added p50 c=1 ms | p50 / p99 c=1 ms | gateway CPU ms/req c=64 | allocs/req | B/req | streamed TTFT added p50 / p99 ms | A/B TTFT added p50 / p99 ms (direct p99) | other cores | errors |')
    print('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    for t in targets:
        s = summary[t]
        print(f'| {t} | {fmt(s["req_per_s_c64"], 0)} | {fmt(s["ratio_vs_direct_c64"], 3)} | {fmt(s["added_p50_ms_c1"], 3)} | '
              f'{fmt(s["p50_ms_c1"], 3)} / {fmt(s["p99_ms_c1"], 3)} | {fmt(s["gateway_cpu_ms_per_req_c64"], 3)} | '
              f'{fmt(s["allocs_per_req"], 0)} | {fmt(s["alloc_bytes_per_req"], 0)} | {fmt(s["ttft_p50_added_ms"], 3)} / {fmt(s["ttft_p99_added_ms"], 3)} | '
              f'{fmt(s["ab_ttft_p50_added_ms"], 3)} / {fmt(s["ab_ttft_p99_added_ms"], 3)} ({fmt(s["ab_direct_ttft_p99_ms"], 3)}) | '
              f'{fmt(s["other_busy_cores"], 2)} | {s["errors"]} |')
    print()
    bifrost_ratio = None
    if 'rb-full' in summary and 'bifrost' in summary:
        per = round_ratios(rows, 'rb-full', 'bifrost')
        bifrost_ratio = med([x for _, x in per])
        summary['rb-full']['ratio_vs_bifrost_c64'] = bifrost_ratio
        summary['rb-full']['ratio_vs_bifrost_c64_rounds'] = [x for _, x in per]
        print('### rb-full / bifrost req/s at c=64 (same round)')
        for rnd, x in per:
            print(f'  round {rnd}: {x:.3f}')
        print(f'  median: {fmt(bifrost_ratio, 3)}  (bifrost {fmt(summary["bifrost"]["ratio_vs_direct_c64"], 3)}× direct, '
              f'rb-full {fmt(summary["rb-full"]["ratio_vs_direct_c64"], 3)}× direct; bifrost errors {summary["bifrost"]["errors"]})')
        cpu_b, cpu_f = summary['bifrost']['gateway_cpu_ms_per_req_c64'], summary['rb-full']['gateway_cpu_ms_per_req_c64']
        if cpu_b and cpu_f:
            print(f'  gateway CPU per request at c=64: bifrost {cpu_b:.3f} ms, rb-full {cpu_f:.3f} ms '
                  f'(bifrost / rb-full {cpu_b / cpu_f:.2f}; depends less on the machine load than req/s)')
        won = bifrost_ratio is not None and bifrost_ratio >= 1.2 and summary['bifrost']['errors'] == 0
        print(f'  verdict: {"WON" if won else "LOST"} against the goal rb-full ≥ 1.2× Bifrost req/s at c=64'
              + ('' if summary['bifrost']['errors'] == 0 else ' (Bifrost answered with errors: not a valid comparison)'))
        print()
    goal = []
    if 'rb-full' in summary:
        f = summary['rb-full']
        if bifrost_ratio is not None:
            goal.append(('req/s at c=64 ≥ 1.2× Bifrost (measured in the same rounds)', bifrost_ratio, 1.2, '>='))
        else:
            goal.append(('req/s at c=64 ≥ 0.336× direct (= 1.2× Bifrost at 0.28× direct; Bifrost not measured in this run: set BIFROST_BIN)',
                         f['ratio_vs_direct_c64'], 0.336, '>='))
        goal += [('added p50 at c=1 ≤ 0.3 ms', f['added_p50_ms_c1'], 0.3, '<='),
                 ('gateway CPU ≤ 0.2 ms per request (c=64)', f['gateway_cpu_ms_per_req_c64'], 0.2, '<='),
                 ('streamed TTFT p99 added ≤ 1 ms (c=1, SDK bench, gateway run then direct run)', f['ttft_p99_added_ms'], 1.0, '<='),
                 ('streamed TTFT p99 added ≤ 1 ms (c=1, interleaved A/B)', f['ab_ttft_p99_added_ms'], 1.0, '<=')]
        if 'rb-full-pg' in summary:
            p = summary['rb-full-pg']
            if p['ratio_vs_direct_c64'] and f['ratio_vs_direct_c64']:
                goal.append(('Postgres req/s within 20 % of SQLite', p['ratio_vs_direct_c64'] / f['ratio_vs_direct_c64'], 0.8, '>='))
            if bifrost_ratio is not None:
                goal.append(('Postgres: req/s at c=64 ≥ 1.2× Bifrost (same rounds)',
                             med([x for _, x in round_ratios(rows, 'rb-full-pg', 'bifrost')]), 1.2, '>='))
            else:
                goal.append(('Postgres: req/s at c=64 ≥ 0.336× direct', p['ratio_vs_direct_c64'], 0.336, '>='))
            goal += [('Postgres: added p50 at c=1 ≤ 0.3 ms', p['added_p50_ms_c1'], 0.3, '<='),
                     ('Postgres: gateway CPU ≤ 0.2 ms per request', p['gateway_cpu_ms_per_req_c64'], 0.2, '<='),
                     ('Postgres: streamed TTFT p99 added ≤ 1 ms', p['ttft_p99_added_ms'], 1.0, '<=')]
        print('### issue 14 goal, full routing (rb-full)')
        for name, v, lim, op in goal:
            ok = v is not None and (v >= lim if op == '>=' else v <= lim)
            print(f'  {"WON " if ok else "LOST"}  {name}: {fmt(v, 3)}')
    json.dump({'prompts': n, 'mean_prompt_chars': mean_chars, 'rounds': a.rounds, 'duration_s': a.duration,
               'summary': summary, 'runs': rows}, open(os.path.join(a.out, 'gateway.json'), 'w'), indent=1)
    print(f'\nper-run results: {os.path.join(a.out, "gateway.json")}')


if __name__ == '__main__':
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
