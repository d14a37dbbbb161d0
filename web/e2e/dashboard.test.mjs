// dashboard.test.mjs: the dashboard end to end in real headless Chromium
// against the real server: sign up → register an instance → Test
// connection → create a key → pick weights on the triangle → send requests
// with the key → see them in the overview and usage → log out / log in
// errors → revoke the key. Screenshots of every page at 1440 and 375 px go
// to screenshots/ (git-ignored).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { buildBinary, startServer, startEmulator, tempDir, waitFor } from './lib/procs.mjs';
import { launch, watch, shoot, chromiumMissing } from './lib/browser.mjs';

const CI = process.env.CI === 'true' || process.env.CI === '1';
const missing = chromiumMissing();

const EMAIL = `e2e-${Date.now()}@example.com`;
const PASSWORD = 'correct-horse-42';

async function text(page, selector) {
  return ((await page.locator(selector).first().textContent()) || '').trim();
}

async function untilText(page, selector, re, timeoutMs = 15_000) {
  return waitFor(`${selector} to match ${re}`, async () => {
    const loc = page.locator(selector).first();
    if (!(await loc.count())) return false;
    const t = ((await loc.textContent()) || '').trim();
    return re.test(t) ? t : false;
  }, { timeoutMs });
}

async function fieldError(page, name) {
  return untilText(page, `.field:has([name="${name}"]) .field-error`, /\S/);
}

/** apiAs calls the management API with the page's own session token (GET, or opts.method with a JSON opts.body). */
async function apiAs(page, base, path, opts = {}) {
  const token = await page.evaluate(() => {
    const raw = sessionStorage.getItem('routebalance.session') || localStorage.getItem('routebalance.session');
    return raw ? JSON.parse(raw).access_token : '';
  });
  const method = opts.method || 'GET';
  const headers = { Authorization: `Bearer ${token}` };
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(`${base}/api/v1${path}`, { method, headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
  assert.equal(r.status, 200, `${method} ${path}: ${r.status} ${r.status === 200 ? '' : await r.text()}`);
  return r.json();
}

/** clusterId is the id of the tenant's only cluster. */
async function clusterId(page, base) {
  const cl = await apiAs(page, base, '/clusters');
  assert.equal(cl.data.length, 1, 'one cluster');
  return cl.data[0].id;
}

function readout(s) {
  // "Quality 0.65 + Latency 0.20 + Cost 0.15 = 1.00"
  const m = s.match(/Quality ([\d.]+) \+ Latency ([\d.]+) \+ Cost ([\d.]+) = 1\.00/);
  assert.ok(m, `weights readout ${JSON.stringify(s)}`);
  return { quality: Number(m[1]), latency: Number(m[2]), cost: Number(m[3]) };
}

test('dashboard end to end in headless Chromium', { skip: missing && !CI ? missing : false, timeout: 600_000 }, async (t) => {
  assert.equal(missing, '', `browser tests need Chromium in CI: ${missing}`);
  const work = tempDir('rb-e2e-');
  t.after(() => fs.rmSync(work, { recursive: true, force: true }));

  const bin = await buildBinary(work);

  // Instances to register: an emulated vLLM cluster (`routebalance emulate`,
  // the reference 13-instance cluster at 50× speed, OS-chosen ports).
  const emu = await startEmulator(bin);
  t.after(() => emu.proc.stop());
  // The first and the last model of the cluster: a big one and a small one,
  // so traffic shares and prices differ.
  const seen = new Set();
  const distinct = emu.instances.filter((i) => !seen.has(i.model) && seen.add(i.model));
  const instances = [distinct[0], distinct[distinct.length - 1]];
  t.diagnostic(`instances from routebalance emulate: ${instances.map((i) => `${i.model}@${i.url}`).join(', ')}`);

  const srv = await startServer(bin, `${work}/data`);
  t.after(() => srv.proc.stop());
  const base = srv.base;

  const browser = await launch();
  t.after(() => browser.close());
  await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
  const page = await browser.context.newPage();
  const w = watch(page);
  const layout = [];

  // Every endpoint the dashboard calls must answer, the what-if preview
  // included (POST /api/v1/clusters/{id}/whatif, web/README.md).

  // ---- sign up: a weak password is refused next to the field ----------
  await page.goto(`${base}/`);
  await page.waitForURL('**/login');
  layout.push(...await shoot(page, 'login'));
  await page.getByRole('link', { name: 'Create an account' }).click();
  await page.waitForURL('**/signup');
  await page.getByLabel('Name or organisation').fill('E2E Labs');
  await page.getByLabel('Email').fill(EMAIL);
  await page.getByLabel('Password').fill('abcdefghijkl');
  w.expect('POST', /^\/api\/v1\/signup$/, 400);
  await page.getByRole('button', { name: 'Create account' }).click();
  const weak = await fieldError(page, 'password');
  assert.match(weak, /password|letters|digits|characters/i, 'weak password error under the password field');
  layout.push(...await shoot(page, 'signup-error'));

  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Create account' }).click();
  await page.waitForURL('**/cluster');

  // ---- cluster: create, register instances with Test connection --------
  await page.getByRole('button', { name: 'Create cluster' }).click();
  await page.getByRole('heading', { name: 'Register an instance' }).waitFor();
  for (const [k, inst] of instances.entries()) {
    if (k > 0) await page.getByRole('button', { name: 'Register instance' }).first().click();
    await page.getByLabel('Base URL').fill(inst.url);
    await page.getByLabel('Served model name').fill(inst.model);
    await page.getByLabel('GPU type').fill(inst.gpu);
    await page.getByLabel('Tensor-parallel size').fill(String(inst.tp || 1));
    // The first is the bigger model: dearer.
    await page.getByLabel('Input price ($ per 1M tokens)').fill(k ? '0.1' : '0.9');
    await page.getByLabel('Output price ($ per 1M tokens)').fill(k ? '0.2' : '1.8');
    await page.getByLabel('Max concurrency').fill('16');
    await page.getByRole('button', { name: 'Test connection' }).click();
    const result = await untilText(page, '.test-result', /Connection works|failed|not available|not among/);
    assert.match(result, /Connection works/, `test connection result: ${result}`);
    assert.match(result, new RegExp(`“${inst.model.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}” is served`));
    if (k === 0) layout.push(...await shoot(page, 'cluster-register'));
    await page.locator('form.instance-form button[type="submit"]').click();
    await untilText(page, 'table.table tbody', new RegExp(inst.model.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
  }
  // Edit the first instance: a new max concurrency.
  const first = instances[0];
  await page.getByRole('button', { name: `Edit ${first.model} at ${first.url}` }).click();
  await page.getByRole('heading', { name: `Edit ${first.model}` }).waitFor();
  await page.getByLabel('Max concurrency').fill('24');
  await page.getByRole('button', { name: 'Save changes' }).click();
  await untilText(page, `table.table tbody tr:has-text("${first.url}") td:nth-child(7)`, /^24$/);
  // Disable and re-enable the second instance.
  const second = instances[1];
  await page.getByRole('button', { name: `Disable ${second.model} at ${second.url}` }).click();
  await untilText(page, `table.table tbody tr:has-text("${second.url}")`, /disabled/);
  assert.equal((await apiAs(page, base, `/clusters/${await clusterId(page, base)}/instances`)).data.find((i) => i.base_url === second.url).disabled, true);
  await page.getByRole('button', { name: `Enable ${second.model} at ${second.url}` }).click();
  await untilText(page, `table.table tbody tr:has-text("${second.url}")`, /enabled/);
  const stateText = await untilText(page, '.panel:has(h2:text("Live state"))', /Updated|not available/);
  assert.match(stateText, /No live state yet|healthy/, `live state before any request: ${stateText.slice(0, 200)}`);
  layout.push(...await shoot(page, 'cluster'));

  // ---- API key: secret shown once -------------------------------------
  await page.getByRole('link', { name: 'API keys' }).click();
  await page.waitForURL('**/keys');
  await page.getByLabel('Key name').fill('e2e key');
  await page.getByRole('button', { name: 'Create key' }).click();
  const secretInput = page.locator('#new-key-secret');
  await secretInput.waitFor();
  const secret = await secretInput.inputValue();
  assert.match(secret, /^rb_/, 'secret shown once');
  await page.getByRole('button', { name: 'Copy key' }).click();
  await untilText(page, '.secret-box button.btn-small', /Copied|Copy failed/);
  layout.push(...await shoot(page, 'keys-created'));
  await page.getByRole('button', { name: 'I have stored it' }).click();
  assert.equal(await page.locator('#new-key-secret').count(), 0, 'secret gone after dismissal');
  await untilText(page, '#keys-table', /e2e key/);
  await page.getByLabel('Preset for key e2e key').selectOption('latency');
  await untilText(page, '#toast', /now uses latency/);
  assert.equal((await apiAs(page, base, '/keys')).data.find((k) => k.name === 'e2e key').preset, 'latency');
  const listed = await text(page, '#keys-table');
  assert.ok(!listed.includes(secret), 'key list never shows the secret');

  // ---- routing: presets and the triangle -------------------------------
  await page.getByRole('link', { name: 'Routing' }).click();
  await page.waitForURL('**/routing');
  await page.locator('.tri-readout').waitFor();
  await page.locator('label.preset-card[data-preset="quality"]').click();
  assert.deepEqual(readout(await text(page, '.tri-readout')), { quality: 0.8, latency: 0.1, cost: 0.1 });
  // Click inside the triangle near the cost corner: custom weights.
  const box = await page.locator('svg.tri-svg').boundingBox();
  await page.mouse.click(box.x + box.width * 0.72, box.y + box.height * 0.78);
  const clicked = readout(await text(page, '.tri-readout'));
  assert.ok(clicked.cost > clicked.quality && clicked.cost > clicked.latency, `a click near the cost corner favours cost: ${JSON.stringify(clicked)}`);
  assert.ok(await page.locator('#preset-custom').isChecked(), 'dragging selects Custom');
  // Keyboard: five steps of more quality.
  await page.locator('svg.tri-svg').focus();
  for (let i = 0; i < 5; i++) await page.keyboard.press('ArrowUp');
  const picked = readout(await text(page, '.tri-readout'));
  assert.ok(Math.abs(picked.quality - (clicked.quality + 0.05)) < 0.0101, `ArrowUp ×5 adds 0.05 quality: ${JSON.stringify(clicked)} → ${JSON.stringify(picked)}`);
  assert.ok(Math.abs(picked.quality + picked.latency + picked.cost - 1) < 1e-9, 'weights sum to 1');
  const whatif = await untilText(page, '.whatif', /Mean quality|not available|failed/);
  assert.match(whatif, /Mean quality/, `what-if panel shows a prediction: ${whatif}`);
  assert.doesNotMatch(whatif, /not available|failed|NaN|undefined/, `what-if panel: ${whatif}`);
  assert.match(whatif, /sample workload of \d+ requests|\d+ recent requests/, `what-if names its workload: ${whatif}`);
  assert.match(whatif, /starting idle|starting from the live state: \d+ requests? in flight and \d+ queued/, `what-if names the state it starts from: ${whatif}`);
  const wi = await apiAs(page, base, `/clusters/${await clusterId(page, base)}/whatif`, { method: 'POST', body: { weights: picked, max_requests: 50 } });
  for (const k of ['mean_quality', 'mean_e2e_ms', 'p95_e2e_ms', 'mean_ttft_ms', 'mean_cost_usd']) {
    assert.ok(Number.isFinite(wi.predicted[k]) && wi.predicted[k] > 0, `what-if ${k} is a positive number: ${JSON.stringify(wi)}`);
  }
  t.diagnostic(`what-if: ${wi.source}, ${wi.requests} requests at ${wi.rate_rps.toFixed(2)} req/s → ${JSON.stringify(wi.predicted)}`);
  await page.getByRole('button', { name: 'Save preset' }).click();
  await untilText(page, '#toast', /Saved: custom/);
  const settings = await apiAs(page, base, '/settings');
  assert.equal(settings.preset, 'custom');
  for (const k of ['quality', 'latency', 'cost']) {
    assert.ok(Math.abs(settings.weights[k] - picked[k]) < 1e-6, `saved ${k} ${settings.weights[k]} = picked ${picked[k]}`);
  }
  await page.getByLabel('Monthly budget ($)').fill('25');
  await page.getByRole('button', { name: 'Save SLOs and budget' }).click();
  await untilText(page, '#toast', /SLOs and budget saved/);
  assert.equal((await apiAs(page, base, '/settings')).slo.monthly_budget_usd, 25);
  for (const name of ['shortest-queue', 'routebalance']) {
    await page.getByLabel('Policy for this cluster').selectOption(name);
    await page.getByRole('button', { name: 'Save policy' }).click();
    await untilText(page, '#toast', new RegExp(`Policy set to ${name}`));
    assert.equal((await apiAs(page, base, `/clusters/${await clusterId(page, base)}`)).policy.name, name);
  }
  layout.push(...await shoot(page, 'routing'));

  // ---- requests with the key, from node --------------------------------
  const N = 8;
  for (let i = 0; i < N; i++) {
    const stream = i % 4 === 3;
    const r = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${secret}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'auto', stream, max_tokens: 8, messages: [{ role: 'user', content: `e2e request ${i}: say hello` }] }),
    });
    const body = await r.text();
    assert.equal(r.status, 200, `request ${i}: ${body.slice(0, 300)}`);
    assert.ok(r.headers.get('x-routebalance-instance'), 'X-RouteBalance-Instance header');
    if (stream) assert.match(body, /data: \[DONE\]/);
  }

  // ---- the live state counts them --------------------------------------
  await page.getByRole('link', { name: 'Cluster' }).click();
  await page.waitForURL('**/cluster');
  const served = await waitFor('live state to count the served requests', async () => {
    const cells = await page.locator('#state-table tbody tr td:nth-child(8)').allTextContents();
    const n = cells.reduce((a, c) => a + Number(c.split('/')[0].replace(/[^\d]/g, '') || 0), 0);
    return n >= N ? n : false;
  }, { timeoutMs: 15_000 });
  t.diagnostic(`live state: ${served} requests served`);
  assert.equal(await page.locator('#state-table .badge-bad').count(), 0, 'every instance healthy');
  layout.push(...await shoot(page, 'cluster-live'));

  // ---- overview and usage show them ------------------------------------
  await page.getByRole('link', { name: 'Overview' }).click();
  await page.waitForURL('**/overview');
  // The meter writes in batches: reload until the overview counts them all.
  await waitFor('overview to count the requests', async () => {
    await page.reload();
    await untilText(page, 'main', /Requests|not available/);
    const n = Number((await text(page, '.stat .stat-value')).replace(/,/g, ''));
    return n === N;
  }, { timeoutMs: 60_000, intervalMs: 1500 });
  const shares = await text(page, '.share');
  for (const inst of instances) {
    // A model shows in the share chart only if it served traffic; at least one must.
    if (shares.includes(inst.model)) t.diagnostic(`overview share lists ${inst.model}`);
  }
  assert.ok(instances.some((i) => shares.includes(i.model)), `traffic share names a served model: ${shares}`);
  assert.equal(await page.locator('figure.chart .uplot canvas').count() >= 4, true, 'the time charts are drawn (uPlot canvases)');
  layout.push(...await shoot(page, 'overview'));

  await page.getByRole('link', { name: 'Usage & billing' }).click();
  await page.waitForURL('**/usage');
  await untilText(page, 'main', /By model|not available|Could not/);
  for (const table of ['By day', 'By model', 'By API key']) {
    const total = await text(page, `.panel:has(h2:text("${table}")) tfoot td`);
    assert.equal(Number(total.replace(/,/g, '')), N, `usage ${table}: total requests ${total}`);
  }
  const models = await page.locator('.panel:has(h2:text("By model")) tbody th').allTextContents();
  assert.ok(models.every((m) => instances.some((i) => i.model === m.trim())), `usage by model names registered models: ${models}`);
  assert.match(await text(page, '.panel:has(h2:text("By API key"))'), /e2e key/);
  const plan = await untilText(page, '.panel:has(h2:text("Plan and billing"))', /Spend this period|not available|Could not/);
  assert.match(plan, /Spend this period/, `billing panel: ${plan}`);
  // This server runs without Stripe: the page must say so, with no checkout button.
  assert.match(await text(page, '#stripe-note'), /Stripe is not configured/);
  assert.equal(await page.getByRole('button', { name: /Subscribe with Stripe/ }).count(), 0);
  layout.push(...await shoot(page, 'usage'));

  // ---- docs --------------------------------------------------------------
  await page.getByRole('link', { name: 'Docs' }).click();
  await page.waitForURL('**/docs');
  assert.equal(await text(page, '#base-url'), `${base}/v1`);
  layout.push(...await shoot(page, 'docs'));

  // ---- session: reload keeps it; deep link works -----------------------
  await page.goto(`${base}/keys`);
  await untilText(page, '#keys-table', /e2e key/);

  // ---- revoke the key: requests with it fail at once -------------------
  await page.getByRole('button', { name: 'Revoke key e2e key' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Revoke key' }).click();
  await untilText(page, '#toast', /revoked/);
  const after = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${secret}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'auto', messages: [{ role: 'user', content: 'hi' }] }),
  });
  assert.equal(after.status, 401, 'revoked key is refused');

  // ---- the session refreshes itself before the access token expires ----
  const before = await page.evaluate(() => JSON.parse(sessionStorage.getItem('routebalance.session')));
  await page.evaluate(() => {
    const s = JSON.parse(sessionStorage.getItem('routebalance.session'));
    s.expires_at = Date.now() + 61_000; // refresh is due one minute before expiry
    sessionStorage.setItem('routebalance.session', JSON.stringify(s));
  });
  await page.reload();
  const refreshed = await waitFor('the access token to be refreshed', () => page.evaluate((old) => {
    const s = JSON.parse(sessionStorage.getItem('routebalance.session') || 'null');
    return s && s.access_token !== old ? s : null;
  }, before.access_token), { timeoutMs: 15_000 });
  assert.ok(refreshed.expires_at > Date.now() + 5 * 60_000, 'the new token lives for minutes');
  assert.ok(Array.isArray((await apiAs(page, base, '/keys')).data), 'the refreshed token works');

  // ---- a dead session ends on 401: back to log-in with a notice --------
  await page.evaluate(() => {
    const s = JSON.parse(sessionStorage.getItem('routebalance.session'));
    s.access_token = 'x.eyJleHAiOjk5OTk5OTk5OTl9.y';
    s.refresh_token = 'not-a-refresh-token';
    sessionStorage.setItem('routebalance.session', JSON.stringify(s));
  });
  w.expect('GET', /^\/api\/v1\//, 401);
  w.expect('POST', /^\/api\/v1\/refresh$/, 401);
  await page.goto(`${base}/usage`);
  await page.waitForURL('**/login**');
  await untilText(page, 'main .alert', /session ended/);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('routebalance.session')), null, 'session cleared');
  await page.getByLabel('Email').fill(EMAIL);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.waitForURL('**/usage');

  // ---- log out; wrong password and taken email errors ------------------
  // Log out revokes the login on the server: its refresh token stops working.
  const refreshToken = await page.evaluate(() => JSON.parse(sessionStorage.getItem('routebalance.session') || localStorage.getItem('routebalance.session') || '{}').refresh_token);
  const loggedOut = page.waitForResponse((r) => r.url().endsWith('/api/v1/logout'));
  await page.getByRole('button', { name: 'Log out' }).click();
  assert.equal((await loggedOut).status(), 204, 'POST /api/v1/logout');
  await page.waitForURL('**/login');
  assert.ok(refreshToken, 'a refresh token was stored before logging out');
  const again = await fetch(`${base}/api/v1/refresh`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ refresh_token: refreshToken }) });
  assert.equal(again.status, 401, 'the logged-out refresh token is refused');
  await page.getByLabel('Email').fill(EMAIL);
  await page.getByLabel('Password').fill('not-the-password-1');
  w.expect('POST', /^\/api\/v1\/login$/, 401);
  await page.getByRole('button', { name: 'Log in' }).click();
  assert.match(await fieldError(page, 'password'), /Wrong email or password/);
  layout.push(...await shoot(page, 'login-error'));
  await page.getByRole('link', { name: 'Create an account' }).click();
  // Wait for the new page: filling before it renders types into the old form.
  await page.waitForURL('**/signup');
  await page.getByRole('button', { name: 'Create account' }).waitFor();
  await page.getByLabel('Name or organisation').fill('Someone Else');
  await page.getByLabel('Email').fill(EMAIL);
  await page.getByLabel('Password').fill(PASSWORD);
  w.expect('POST', /^\/api\/v1\/signup$/, 409);
  await page.getByRole('button', { name: 'Create account' }).click();
  assert.match(await fieldError(page, 'email'), /already exists/);
  await page.getByRole('link', { name: 'Log in' }).click();
  await page.waitForURL('**/login');
  await page.getByRole('button', { name: 'Log in' }).waitFor();
  await page.getByLabel('Email').fill(EMAIL);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.waitForURL('**/overview');
  await page.reload();
  await page.waitForURL('**/overview');
  assert.equal(await page.locator('#nav').isVisible(), true, 'still signed in after a reload');

  assert.deepEqual(layout, [], 'layout overflow or unlabelled controls');
  assert.deepEqual(w.check(), [], 'console errors, page errors or unexpected HTTP errors');
});
