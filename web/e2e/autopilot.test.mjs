// autopilot.test.mjs: the autopilot end to end in headless Chromium
// against the real server and emulated vLLM instances: requests with
// preset autopilot carry X-RouteBalance-Weights on their answers, the
// controller steps (serve --autopilot-interval 1s), GET
// /api/v1/clusters/{id}/autopilot reports it, and the cluster page draws
// its weights and window p95 over time with the share of windows met.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { buildBinary, startServer, startEmulator, tempDir, waitFor } from './lib/procs.mjs';
import { launch, watch, shoot, chromiumMissing } from './lib/browser.mjs';

const CI = process.env.CI === 'true' || process.env.CI === '1';
const missing = chromiumMissing();
const PASSWORD = 'correct-horse-42';

test('autopilot: header, status endpoint and dashboard chart', { skip: missing && !CI ? missing : false, timeout: 600_000 }, async (t) => {
  assert.equal(missing, '', `browser tests need Chromium in CI: ${missing}`);
  const work = tempDir('rb-e2e-ap-');
  t.after(() => fs.rmSync(work, { recursive: true, force: true }));
  const bin = await buildBinary(work);
  const emu = await startEmulator(bin);
  t.after(() => emu.proc.stop());
  const srv = await startServer(bin, `${work}/data`, ['--autopilot-interval', '1s']);
  t.after(() => srv.proc.stop());
  const base = srv.base;

  const browser = await launch();
  t.after(() => browser.close());
  const page = await browser.context.newPage();
  const w = watch(page);

  await page.goto(`${base}/signup`);
  await page.getByLabel('Name or organisation').fill('Autopilot Labs');
  await page.getByLabel('Email').fill(`autopilot-${Date.now()}@example.com`);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Create account' }).click();
  await page.waitForURL('**/cluster');

  const token = await page.evaluate(() => {
    const raw = sessionStorage.getItem('routebalance.session') || localStorage.getItem('routebalance.session');
    return raw ? JSON.parse(raw).access_token : '';
  });
  const api = async (method, path, body) => {
    const r = await fetch(`${base}/api/v1${path}`, {
      method, headers: { Authorization: `Bearer ${token}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    assert.ok(r.status < 300, `${method} ${path}: ${r.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };
  const cluster = await api('POST', '/clusters', { name: 'main' });
  const seen = new Set();
  for (const inst of emu.instances.filter((i) => !seen.has(i.model) && seen.add(i.model)).slice(0, 2)) {
    await api('POST', `/clusters/${cluster.id}/instances`, { base_url: inst.url, model: inst.model, gpu: inst.gpu, tensor_parallel: inst.tp || 1,
      price_in_per_mtok: 0.5, price_out_per_mtok: 1, max_concurrency: 8 });
  }
  const key = await api('POST', '/keys', { name: 'autopilot', cluster_id: cluster.id });

  // Before any autopilot request: the panel says none is running yet.
  await page.reload();
  await page.locator('#autopilot-none').waitFor();

  const send = async (headers) => fetch(`${base}/v1/chat/completions`, {
    method: 'POST', headers: { Authorization: `Bearer ${key.key}`, 'Content-Type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'auto', messages: [{ role: 'user', content: 'Name a prime number.' }], max_tokens: 16 }),
  });
  // A bad target is the OpenAI error envelope, 400, naming the header.
  const bad = await send({ 'X-RouteBalance-Preset': 'autopilot', 'X-RouteBalance-Autopilot': 'p95_e2e_ms=-3' });
  assert.equal(bad.status, 400);
  const env = await bad.json();
  assert.equal(env.error.type, 'invalid_request_error');
  assert.equal(env.error.param, 'X-RouteBalance-Autopilot');
  // Autopilot requests over a few control intervals; every answer names
  // the weights it was routed with.
  const ap = { 'X-RouteBalance-Preset': 'autopilot', 'X-RouteBalance-Autopilot': 'p95_e2e_ms=20000' };
  const deadline = Date.now() + 6000;
  let n = 0;
  while (Date.now() < deadline) {
    const r = await send(ap);
    const body = await r.text();
    assert.equal(r.status, 200, body);
    const wts = r.headers.get('x-routebalance-weights');
    assert.match(wts || '', /^quality=[\d.]+,cost=[\d.]+,latency=[\d.]+$/, `X-RouteBalance-Weights ${wts}`);
    n++;
  }
  assert.ok(n >= 3, `${n} requests sent`);
  // A fixed preset carries its own weights in the header too.
  const fixed = await send({ 'X-RouteBalance-Preset': 'latency' });
  assert.equal(fixed.headers.get('x-routebalance-weights'), 'quality=0.1000,cost=0.1000,latency=0.8000');

  const st = await waitFor('a judged autopilot window', async () => {
    const s = await api('GET', `/clusters/${cluster.id}/autopilot`);
    const c = s.controllers && s.controllers[0];
    return c && c.windows.some((x) => x.n > 0) && c.decisions.length >= 2 ? s : null;
  }, { timeoutMs: 30_000 });
  assert.equal(st.running, true);
  assert.equal(st.controllers.length, 1);
  const c = st.controllers[0];
  assert.equal(c.targets.p95_e2e_ms, 20000);
  assert.ok(c.attainment > 0, `attainment ${c.attainment}: the emulator answers well within 20 s`);

  await page.reload();
  const panel = page.locator('#autopilot-controllers .autopilot-controller').first();
  await panel.waitFor();
  assert.match(await panel.locator('h3').textContent(), /p95 E2E ≤ 20(\.00)? s/);
  assert.match(await panel.locator('.autopilot-attainment').textContent(), /%/);
  assert.match(await panel.locator('.autopilot-weights').textContent(), /quality [\d.]+ · latency [\d.]+ · cost [\d.]+/);
  // Two charts drawn by uPlot (a canvas each), with their legends.
  await waitFor('two autopilot charts', async () => (await panel.locator('figure.chart canvas').count()) === 2, { timeoutMs: 15_000 });
  const legend = await panel.locator('figure.chart').first().textContent();
  for (const s of ['quality', 'latency', 'cost']) assert.ok(legend.includes(s), `weights legend has ${s}: ${legend}`);
  assert.ok(await panel.locator('.autopilot-decisions li').count() >= 1, 'last decisions listed');
  await shoot(page, 'cluster-autopilot');
  assert.deepEqual(w.check(), [], 'no page errors, no unexpected HTTP errors');
});
