// pages.test.mjs: the pages and interactions of issue 15 in real headless
// Chromium against the real server and emulated instances — Test
// connection with only a base URL (served models fill the model field,
// price suggestions), per-key limits/weights/SLOs, settings saved by PATCH
// (an SLO save keeps the preset and the other way round), the request log
// (filters, detail drawer with the routing decision, load more, CSV),
// uPlot charts (hover tooltip, custom date range), the Usage page's charts
// and CSV, the docs' Node snippet with the key prefix, and the 375 px
// layout (every nav item on screen, instance actions without sideways
// scrolling). Screenshots of every page at 1440 and 375 px.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { buildBinary, startServer, startEmulator, tempDir, waitFor } from './lib/procs.mjs';
import { launch, watch, shoot, chromiumMissing } from './lib/browser.mjs';

const CI = process.env.CI === 'true' || process.env.CI === '1';
const missing = chromiumMissing();
const PASSWORD = 'correct-horse-42';

async function untilText(page, selector, re, timeoutMs = 15_000) {
  return waitFor(`${selector} to match ${re}`, async () => {
    const loc = page.locator(selector).first();
    if (!(await loc.count())) return false;
    const t = ((await loc.textContent()) || '').trim();
    return re.test(t) ? t : false;
  }, { timeoutMs });
}

async function token(page) {
  return page.evaluate(() => {
    const raw = sessionStorage.getItem('routebalance.session') || localStorage.getItem('routebalance.session');
    return raw ? JSON.parse(raw).access_token : '';
  });
}

async function api(page, base, path, opts = {}) {
  const headers = { Authorization: `Bearer ${await token(page)}` };
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(`${base}/api/v1${path}`, { method: opts.method || 'GET', headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
  assert.ok(r.ok, `${opts.method || 'GET'} ${path}: ${r.status} ${r.ok ? '' : await r.text()}`);
  return r.status === 204 ? null : r.json();
}

const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

test('issue 15 pages in headless Chromium', { skip: missing && !CI ? missing : false, timeout: 600_000 }, async (t) => {
  assert.equal(missing, '', `browser tests need Chromium in CI: ${missing}`);
  const work = tempDir('rb-e2e-pages-');
  t.after(() => fs.rmSync(work, { recursive: true, force: true }));
  const bin = await buildBinary(work);
  const emu = await startEmulator(bin);
  t.after(() => emu.proc.stop());
  const small = emu.instances.find((i) => i.model === 'gemma-2-9b-it') || emu.instances[emu.instances.length - 1];
  const srv = await startServer(bin, `${work}/data`);
  t.after(() => srv.proc.stop());
  const base = srv.base;

  const browser = await launch();
  t.after(() => browser.close());
  const page = await browser.context.newPage();
  const w = watch(page);
  const layout = [];
  const methods = [];
  page.on('request', (r) => { if (r.url().includes('/api/v1/settings')) methods.push(r.method()); });

  // ---- sign up through the form ------------------------------------------
  await page.goto(`${base}/signup`);
  await page.getByLabel('Name or organisation').fill('Pages Labs');
  await page.getByLabel('Email').fill(`pages-${Date.now()}@example.com`);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Create account' }).click();
  await page.waitForURL('**/cluster');
  await page.getByRole('button', { name: 'Create cluster' }).click();
  await page.getByRole('heading', { name: 'Register an instance' }).waitFor();

  // ---- item 9: a refused URL leaves no "Checking…" behind -----------------
  w.expect('POST', /\/instances\/test-connection$/, 400);
  await page.getByLabel('Base URL').fill('http://169.254.169.254');
  await page.getByRole('button', { name: 'Test connection' }).click();
  await untilText(page, `.field:has([name="base_url"]) .field-error`, /\S/);
  assert.equal((await page.locator('.test-result').textContent()).trim(), '', 'no stale "Checking…" after a refused URL');

  // ---- item 4: Test connection needs only the base URL --------------------
  await page.getByLabel('Base URL').fill(small.url);
  assert.equal(await page.getByLabel('Served model name').inputValue(), '');
  await page.getByRole('button', { name: 'Test connection' }).click();
  const rep = await untilText(page, '.test-result', /Connection works|failed/);
  assert.match(rep, /Connection works/, rep);
  assert.equal(await page.getByLabel('Served model name').inputValue(), small.model, 'the one served model fills the model field');
  assert.ok(await page.locator('.model-chips .chip', { hasText: small.model }).count(), 'served model ids listed');
  // GPU types come from the known tiers; prices are suggested per model.
  const gpus = await page.locator('#gpu-list option').evaluateAll((os) => os.map((o) => o.value));
  for (const g of ['a100-80g', 'v100-32g', 'a30-24g', 'h100-80g']) assert.ok(gpus.includes(g), `gpu tier ${g} offered: ${gpus}`);
  const sug = await untilText(page, '#price-suggestion', /Suggested/);
  assert.match(sug, new RegExp(`${esc(small.model)} on a30-24g`), sug);
  layout.push(...await shoot(page, 'pages-cluster-test'));
  await page.locator('#price-suggestion').getByRole('button', { name: 'Use these' }).click();
  assert.equal(await page.getByLabel('Input price ($ per 1M tokens)').inputValue(), '0.1');
  assert.equal(await page.getByLabel('GPU type').inputValue(), 'a30-24g');
  // vLLM's /v1/models states no kind: the form keeps its default, chat.
  assert.equal(await page.getByLabel('Kind').inputValue(), 'chat');
  await page.locator('form.instance-form button[type="submit"]').click();
  await untilText(page, '#instances-table tbody', new RegExp(esc(small.model)));

  // ---- issue 19: an embedding instance is registered with its kind --------
  await page.getByRole('button', { name: 'Register instance' }).first().click();
  await page.getByRole('heading', { name: 'Register an instance' }).waitFor();
  await page.getByLabel('Base URL').fill(small.url);
  await page.getByLabel('Served model name').fill('e2e-embedder');
  await page.getByLabel('Kind').selectOption('embedding');
  await page.locator('form.instance-form button[type="submit"]').click();
  const embRow = page.locator('#instances-table tbody tr', { hasText: 'e2e-embedder' });
  await embRow.waitFor();
  assert.equal((await embRow.locator('.badge-kind').textContent()).trim(), 'embedding');
  await page.getByRole('button', { name: `Delete e2e-embedder at ${small.url}` }).click();
  await page.getByRole('button', { name: 'Delete instance' }).click();
  await embRow.waitFor({ state: 'detached' });

  // ---- item 7: instance actions reachable at 375 px without sideways scroll
  await page.setViewportSize({ width: 375, height: 812 });
  await page.waitForTimeout(200);
  for (const name of ['Edit', 'Disable', 'Delete']) {
    const box = await page.getByRole('button', { name: `${name} ${small.model} at ${small.url}` }).boundingBox();
    assert.ok(box && box.x >= 0 && box.x + box.width <= 375, `${name} button on screen at 375 px: ${JSON.stringify(box)}`);
  }
  const scrollers = await page.evaluate(() => [...document.querySelectorAll('#instances-table')].map((tb) => tb.parentElement.scrollWidth - tb.parentElement.clientWidth));
  assert.deepEqual(scrollers, [0], 'the instance table does not scroll sideways');
  // Every nav item is on screen (none cut off or hidden).
  const nav = await page.locator('#nav a').evaluateAll((as) => as.map((a) => { const r = a.getBoundingClientRect(); return { t: a.textContent, l: r.left, r: r.right, w: r.width }; }));
  assert.equal(nav.length, 7);
  for (const n of nav) assert.ok(n.w > 0 && n.l >= 0 && n.r <= 375, `nav ${n.t} visible at 375 px: ${JSON.stringify(n)}`);
  await page.setViewportSize({ width: 1440, height: 900 });

  // ---- keys: create, dismiss the banner (no blank band), edit limits/weights/SLOs
  await page.locator('#nav a[href="/keys"]').click();
  await page.getByLabel('Key name').fill('backend');
  await page.getByRole('button', { name: 'Create key' }).click();
  const secret = await page.locator('#new-key-secret').inputValue();
  assert.match(secret, /^rb_/);
  const gapBefore = await page.evaluate(() => document.querySelector('.page h1').parentElement.nextElementSibling.getBoundingClientRect().height);
  assert.ok(gapBefore > 0);
  await page.getByRole('button', { name: 'I have stored it' }).click();
  const firstPanelTop = await page.evaluate(() => {
    const head = document.querySelector('.page .page-head').getBoundingClientRect();
    const panel = document.querySelector('.page .panel').getBoundingClientRect();
    return panel.top - head.bottom;
  });
  assert.ok(firstPanelTop < 24, `no blank band after dismissing the banner: gap ${firstPanelTop}px`);
  await page.getByRole('button', { name: 'Edit key backend' }).click();
  await page.locator('#key-editor').waitFor();
  await page.locator('#key-editor').getByLabel('Preset').selectOption('custom');
  const tri = page.locator('#key-editor .tri-svg');
  await tri.focus();
  for (let i = 0; i < 3; i++) await page.keyboard.press('ArrowUp');
  await page.locator('#key-editor').getByLabel('Requests per minute').fill('60');
  await page.locator('#key-editor').getByLabel('Requests at once').fill('4');
  await page.locator('#key-editor').getByLabel('TTFT SLO (ms)').fill('900');
  await page.locator('#key-editor').getByLabel('Monthly budget ($)').fill('5');
  layout.push(...await shoot(page, 'pages-key-edit'));
  await page.getByRole('button', { name: 'Save key' }).click();
  await untilText(page, '#keys-table tbody', /60 rpm/);
  const keys = await api(page, base, '/keys');
  const k = keys.data.find((x) => x.name === 'backend');
  assert.equal(k.preset, 'custom');
  assert.ok(Math.abs(k.weights.quality - (1 / 3 + 0.03)) < 0.011, `weights from the triangle: ${JSON.stringify(k.weights)}`);
  assert.deepEqual(k.limits, { rpm: 60, tpm: 0, max_concurrency: 4 });
  assert.equal(k.slo.ttft_ms, 900);
  assert.equal(k.slo.monthly_budget_usd, 5);

  // ---- item 5: the dashboard saves settings with PATCH ----------------------
  await page.locator('#nav a[href="/routing"]').click();
  await page.getByLabel('Time to first token SLO (ms)').fill('800');
  await page.getByRole('button', { name: 'Save SLOs and budget' }).click();
  await waitFor('SLO saved', async () => (await api(page, base, '/settings')).slo.ttft_ms === 800);
  await page.locator('label[for="preset-cost"]').click();
  await page.getByRole('button', { name: 'Save preset' }).click();
  await waitFor('preset saved', async () => (await api(page, base, '/settings')).preset === 'cost');
  const st = await api(page, base, '/settings');
  assert.equal(st.slo.ttft_ms, 800, 'saving the preset kept the SLO');
  assert.ok(methods.includes('PATCH') && !methods.includes('PUT'), `settings writes are PATCH: ${methods}`);
  // item 9: the balanced marker's "B" is not under the handle.
  await page.locator('label[for="preset-balanced"]').click();
  const overlap = await page.evaluate(() => {
    const hdl = document.querySelector('.tri-row .tri-handle').getBoundingClientRect();
    const b = [...document.querySelectorAll('.tri-row .tri-marker-label')].find((x) => x.textContent === 'B').getBoundingClientRect();
    return !(b.left >= hdl.right || b.right <= hdl.left || b.top >= hdl.bottom || b.bottom <= hdl.top);
  });
  assert.equal(overlap, false, 'the B label is clear of the handle');

  // ---- traffic: 55 requests with the key (some streamed, two models' worth) --
  for (let i = 0; i < 55; i++) {
    const r = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${secret}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'auto', stream: i % 4 === 0, max_tokens: 24, messages: [{ role: 'user', content: `Question ${i}: what is ${i} + ${i}?` }] }),
    });
    assert.equal(r.status, 200, `request ${i}: ${r.status} ${r.status === 200 ? '' : await r.text()}`);
    await r.text();
  }

  // The meter writes the ledger in batches: wait until it holds all 55.
  await waitFor('the ledger holds the 55 requests', async () => (await api(page, base, '/usage')).total.requests === 55, { timeoutMs: 30_000 });

  // ---- item 2: request log page -------------------------------------------
  await page.locator('#nav a[href="/requests"]').click();
  await untilText(page, '#requests-table tbody', new RegExp(esc(small.model)));
  await waitFor('first page of 50', async () => (await page.locator('#requests-table tbody tr').count()) === 50);
  await page.getByRole('button', { name: 'Load more' }).click();
  await waitFor('55 rows', async () => (await page.locator('#requests-table tbody tr').count()) === 55);
  assert.equal(await page.getByRole('button', { name: 'Load more' }).isVisible(), false, 'no more pages');
  const firstRow = await page.locator('#requests-table tbody tr').first().textContent();
  assert.match(firstRow, /backend/, 'key name shown');
  // Detail drawer with the routing decision.
  await page.locator('#requests-table tbody tr').first().locator('button.linkish').click();
  const drawer = page.locator('dialog.drawer');
  await drawer.waitFor();
  const dtext = await drawer.textContent();
  for (const want of ['Routing decision', 'Predicted quality', 'Predicted E2E', 'Relaxed filters', 'Attempts', small.model]) assert.ok(dtext.includes(want), `drawer shows ${want}: ${dtext}`);
  // The decision was recorded at metering time: the key's custom weights, a predicted E2E.
  assert.ok(!dtext.includes('Not recorded'), `weights recorded: ${dtext}`);
  assert.match(dtext, /Presetcustom/, 'the key\'s custom preset');
  assert.ok(await drawer.locator('.wbars').count(), 'weight bars');
  assert.match(dtext, /Predicted E2E[\d.]+ (ms|s)/, 'a predicted E2E');
  layout.push(...await shoot(page, 'pages-request-drawer'));
  await page.keyboard.press('Escape');
  await waitFor('drawer closed', async () => (await page.locator('dialog.drawer').count()) === 0);
  // Filters: status=error has none; the key filter keeps all.
  await page.getByLabel('Status').selectOption('error');
  await untilText(page, '.page .panel', /No requests match these filters/);
  await page.getByLabel('Status').selectOption('');
  await page.getByLabel('Key').selectOption({ label: `backend (${k.prefix}…)` });
  await waitFor('key filter', async () => (await page.locator('#requests-table tbody tr').count()) === 50);
  // CSV export with the same filters.
  const [dl] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Export CSV' }).click()]);
  const csv = fs.readFileSync(await dl.path(), 'utf8').trim().split('\n');
  assert.equal(csv.length, 56, 'header + 55 requests');
  assert.match(csv[0], /^id,started_at,/);
  layout.push(...await shoot(page, 'pages-requests'));

  // ---- item 3: charts: uPlot canvas, hover tooltip, custom range -----------
  await page.locator('#nav a[href="/overview"]').click();
  const reqChart = page.locator('figure.chart', { hasText: 'Requests' }).first();
  await reqChart.locator('.u-over').waitFor();
  const over = await reqChart.locator('.u-over').boundingBox();
  // The traffic is in the last hour: hover the right end of the plot.
  let tip = '';
  for (let x = over.x + over.width - 2; x > over.x + over.width - 60 && !/requests/.test(tip); x -= 3) {
    await page.mouse.move(x, over.y + over.height / 2);
    tip = (await reqChart.locator('.chart-tip').isVisible()) ? await reqChart.locator('.chart-tip').textContent() : '';
  }
  assert.match(tip, /requests\s*55/, `tooltip on hover: ${tip}`);
  assert.ok(await reqChart.locator('.u-cursor-x').count(), 'crosshair');
  layout.push(...await shoot(page, 'pages-overview'));
  const sel = page.getByLabel('Period');
  await sel.selectOption('custom');
  const today = await page.evaluate(() => { const d = new Date(); const p = (n) => String(n).padStart(2, '0'); return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`; });
  await page.getByLabel('From').fill('2020-01-02');
  await page.getByLabel('to', { exact: true }).fill('2020-01-01');
  await untilText(page, '.range-custom .field-error', /before the start/);
  await page.getByLabel('From').fill(today);
  await page.getByLabel('to', { exact: true }).fill(today);
  await untilText(page, '.stats .stat', /Requests\s*55/);
  layout.push(...await shoot(page, 'pages-overview-custom'));

  // ---- Usage page charts and CSV ---------------------------------------------
  await page.locator('#nav a[href="/usage"]').click();
  await page.locator('figure.chart', { hasText: 'Requests per day' }).locator('.u-over').waitFor();
  assert.match(await page.locator('figure.share', { hasText: 'Requests by API key' }).textContent(), /backend/);
  const [udl] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'CSV by model' }).click()]);
  const ucsv = fs.readFileSync(await udl.path(), 'utf8').trim().split('\n');
  assert.match(ucsv[0], /^model,requests,/);
  assert.match(ucsv[ucsv.length - 1], /^total,55,/);
  layout.push(...await shoot(page, 'pages-usage'));

  // ---- item 8: docs: Node/TypeScript snippet with the key prefix --------------
  await page.locator('#nav a[href="/docs"]').click();
  // The key list loads after the page: wait for the prefix to be filled in.
  await untilText(page, '.snippet[data-lang="sh"]', new RegExp(esc(`${k.prefix}…`)));
  const node = await page.locator('.snippet[data-lang="ts"]').textContent();
  assert.match(node, /import OpenAI from "openai"/);
  assert.match(node, new RegExp(esc(base)));
  const curl = await page.locator('.snippet[data-lang="sh"]').textContent();
  assert.ok(curl.includes(`${k.prefix}…`), `key prefix filled in: ${curl.slice(0, 200)}`);
  layout.push(...await shoot(page, 'pages-docs'));

  // ---- item 1: the what-if preview replays the observed traffic and shows it
  await page.locator('#nav a[href="/routing"]').click();
  await page.locator('#whatif-result[data-source="observed"]').waitFor({ timeout: 20_000 });
  const wtext = await page.locator('#whatif-result').textContent();
  assert.match(wtext, /last 55 requests/, wtext);
  assert.match(wtext, /observed [\d.]+ req\/s/, wtext);
  assert.match(wtext, /observed [\d.]+ (ms|s)/, 'observed latency next to the prediction');
  assert.match(wtext, /starting from the live state: \d+ requests? in flight and \d+ queued on \d+ instances?/, `the live state it starts from: ${wtext}`);
  layout.push(...await shoot(page, 'pages-whatif'));

  for (const p of ['cluster', 'routing', 'keys', 'requests']) {
    await page.locator(`#nav a[href="/${p}"]`).click();
    await page.waitForTimeout(800);
    layout.push(...await shoot(page, `pages-${p}`));
  }
  assert.deepEqual(layout, [], 'layout problems');
  assert.deepEqual(w.check(), [], 'console errors or unexpected HTTP errors');
});
