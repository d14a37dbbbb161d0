// procs.mjs: build the routebalance binary once, start `serve` and
// `emulate` as child processes on loopback, and stop them when the test
// ends.

import { spawn, execFile } from 'node:child_process';
import { promisify } from 'node:util';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const run = promisify(execFile);
/** REPO is the repository root (two levels above web/e2e). */
export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** buildBinary runs `go build ./cmd/routebalance` into dir and returns the path. */
export async function buildBinary(dir) {
  const out = path.join(dir, 'routebalance');
  await run('go', ['build', '-o', out, './cmd/routebalance'], { cwd: REPO, env: process.env, maxBuffer: 16 << 20 });
  return out;
}

/**
 * printedAddress waits until proc prints a line matching re and returns
 * its first group: the address a child bound on port 0 (the kernel's
 * port, read back; a port picked here and released for the child to bind
 * could be taken by another process in between).
 */
export function printedAddress(what, proc, re, timeoutMs) {
  return waitFor(what, () => (proc.log.out.match(re) || [])[1], { proc, timeoutMs });
}

/** start spawns bin with args, keeping its output for error reports. */
export function start(bin, args, { env } = {}) {
  const child = spawn(bin, args, { env: env || process.env, stdio: ['ignore', 'pipe', 'pipe'] });
  const log = { out: '', err: '' };
  child.stdout.on('data', (d) => { log.out += d; });
  child.stderr.on('data', (d) => { log.err += d; });
  const exited = new Promise((resolve) => child.on('exit', (code, sig) => resolve({ code, sig })));
  return {
    child, log, exited,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(t);
    },
  };
}

/** waitFor polls fn until it returns a truthy value or the deadline passes. */
export async function waitFor(what, fn, { timeoutMs = 30_000, intervalMs = 200, proc } = {}) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    if (proc && (proc.child.exitCode !== null || proc.child.signalCode !== null)) {
      throw new Error(`${what}: process exited (${proc.child.exitCode ?? proc.child.signalCode})\nstdout:\n${proc.log.out.slice(-3000)}\nstderr:\n${proc.log.err.slice(-3000)}`);
    }
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) { last = e; }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}${proc ? `\nstderr:\n${proc.log.err.slice(-3000)}` : ''}`);
}

/**
 * startServer runs `routebalance serve` on a free loopback port with a
 * fresh data dir (embedded SQLite) and private endpoints allowed.
 */
export async function startServer(bin, dataDir, extraArgs = []) {
  const env = { ...process.env };
  // Embedded SQLite in the temp data dir: the run shares no database with
  // anything else (scripts/test.sh exports DATABASE_URL for the Go tests).
  delete env.DATABASE_URL;
  for (const k of Object.keys(env)) if (k.startsWith('ROUTEBALANCE_')) delete env[k];
  // Metrics on a free port too: the default 127.0.0.1:9091 collides with any
  // other serve on the machine (a second test run, a developer's own).
  const proc = start(bin, ['serve', '--addr', '127.0.0.1:0', '--data-dir', dataDir, '--allow-private-endpoints', '--metrics-addr', '127.0.0.1:0', ...extraArgs], { env });
  const base = await printedAddress('routebalance serve to listen', proc, /routebalance listening on (http:\/\/\S+)/, 60_000);
  await waitFor('routebalance serve /readyz', async () => (await fetch(`${base}/readyz`)).ok, { proc, timeoutMs: 60_000 });
  return { base, proc };
}

/**
 * startEmulator runs `routebalance emulate` (the embedded reference cluster,
 * time scaled 50× faster) on OS-chosen loopback ports and parses the
 * instance table it prints (K URL MODEL GPU TP INSTANCE).
 */
export async function startEmulator(bin) {
  const proc = start(bin, ['emulate', '--host', '127.0.0.1', '--base-port', '0', '--time-scale', '0.02', '--seed', '7']);
  try {
    const instances = await waitFor('routebalance emulate instance table', () => {
      const rows = proc.log.out.split('\n').map((l) => l.trim().split(/\s+/)).filter((f) => /^\d+$/.test(f[0]) && /^https?:\/\//.test(f[1] || ''));
      return rows.length && /Ctrl-C/.test(proc.log.out) ? rows.map((f) => ({ url: f[1], model: f[2], gpu: f[3], tp: Number(f[4]) })) : null;
    }, { timeoutMs: 30_000, proc });
    return { proc, instances };
  } catch (e) {
    await proc.stop();
    throw e;
  }
}

/** findStripeMock returns the stripe-mock binary (PATH, then GOPATH/bin), or ''. */
export async function findStripeMock() {
  for (const dir of (process.env.PATH || '').split(':')) {
    if (dir && fs.existsSync(path.join(dir, 'stripe-mock'))) return path.join(dir, 'stripe-mock');
  }
  try {
    const { stdout } = await run('go', ['env', 'GOPATH']);
    const p = path.join(stdout.trim(), 'bin', 'stripe-mock');
    return fs.existsSync(p) ? p : '';
  } catch {
    return '';
  }
}

/**
 * startStripeMock runs stripe-mock on kernel-chosen loopback ports (read
 * back from its "Listening for HTTP at address" line); resolves to {url, proc}.
 * It loads its OpenAPI spec first: seconds on a loaded machine.
 */
export async function startStripeMock(bin) {
  const proc = start(bin, ['-http-addr', '127.0.0.1:0', '-https-addr', '127.0.0.1:0']);
  const addr = await printedAddress('stripe-mock to listen', proc, /Listening for HTTP at address: (\S+)/, 120_000);
  const url = `http://${addr}`;
  await waitFor('stripe-mock', async () => (await fetch(`${url}/v1/customers`, { headers: { Authorization: 'Bearer sk_test_123' } })).ok, { proc, timeoutMs: 60_000 });
  return { url, proc };
}

/** tempDir makes a fresh directory under the OS temp dir. */
export function tempDir(prefix) {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}
