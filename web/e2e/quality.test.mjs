// quality.test.mjs: the Quality data page (issue 20) in real headless
// Chromium against the real server: a bad upload lists its lines, a good
// one shows progress, builds (status, counts per model, validation AUC,
// estimate source) and draws the Q̂ chart; the judge settings save and
// refuse a bad value next to its field; no console errors; no sideways
// overflow at 1440 and 375 px.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { buildBinary, startServer, tempDir, waitFor } from './lib/procs.mjs';
import { launch, watch, shoot, chromiumMissing } from './lib/browser.mjs';

const CI = process.env.CI === 'true' || process.env.CI === '1';
const missing = chromiumMissing();

async function token(page) {
  return page.evaluate(() => {
    const raw = sessionStorage.getItem('routebalance.session') || localStorage.getItem('routebalance.session');
    return raw ? JSON.parse(raw).access_token : '';
  });
}

async function api(page, base, p, opts = {}) {
  const headers = { Authorization: `Bearer ${await token(page)}` };
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(`${base}/api/v1${p}`, { method: opts.method || 'GET', headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
  assert.ok(r.ok, `${opts.method || 'GET'} ${p}: ${r.status}`);
  return r.status === 204 ? null : r.json();
}

function lines(n) {
  const out = [];
  for (let i = 0; i < n; i++) {
    out.push(JSON.stringify(i % 2
      ? { id: `r${i}`, prompt: `write a short poem about the sea, number ${i}`, scores: { big: 1, small: 1 } }
      : { id: `r${i}`, prompt: `solve ${i} x + 1 = ${3 * i} for x`, scores: { big: 1, small: 0, 'gpt-x': 1 } }));
  }
  return out.join('\n') + '\n';
}

test('quality data page in headless Chromium', { skip: missing && !CI ? missing : false, timeout: 600_000 }, async (t) => {
  assert.equal(missing, '', `browser tests need Chromium in CI: ${missing}`);
  const work = tempDir('rb-e2e-quality-');
  t.after(() => fs.rmSync(work, { recursive: true, force: true }));
  const bin = await buildBinary(work);
  const srv = await startServer(bin, `${work}/data`);
  t.after(() => srv.proc.stop());
  const base = srv.base;
  const browser = await launch();
  t.after(() => browser.close());
  const page = await browser.context.newPage();
  const w = watch(page);

  await page.goto(`${base}/signup`);
  await page.getByLabel('Name or organisation').fill('Quality Labs');
  await page.getByLabel('Email').fill(`quality-${Date.now()}@example.com`);
  await page.getByLabel('Password').fill('correct-horse-42');
  await page.getByRole('button', { name: 'Create account' }).click();
  await page.waitForURL('**/cluster');
  await page.getByRole('button', { name: 'Create cluster' }).click();
  await page.getByRole('heading', { name: 'Register an instance' }).waitFor();
  const clusters = await api(page, base, '/clusters');
  const cid = (clusters.data || clusters)[0].id;
  for (const model of ['big', 'small']) {
    await api(page, base, `/clusters/${cid}/instances`, { method: 'POST', body: { base_url: 'http://127.0.0.1:9', model, gpu: 'l4-24g' } });
  }

  // The Cluster page links to the cluster's quality data.
  await page.reload();
  await page.getByRole('link', { name: 'Quality data' }).click();
  await page.waitForURL('**/quality');
  await page.getByRole('heading', { name: 'Quality data' }).waitFor();
  await waitFor('status none', async () => /No data/.test(await page.locator('#quality-state').textContent()));

  // A bad upload: nothing stored, every bad line listed with its number.
  w.expect('POST', /\/quality-data$/, 400);
  const bad = path.join(work, 'bad.jsonl');
  fs.writeFileSync(bad, lines(4) + '{"prompt":"x","scores":{"big":2}}\nnot json\n');
  await page.getByLabel('Labelled prompts (JSON lines)').setInputFiles(bad);
  await page.getByRole('button', { name: 'Upload' }).click();
  await page.locator('#upload-errors').waitFor();
  const errs = await page.locator('#upload-errors li').allTextContents();
  assert.deepEqual(errs, ['Line 5: score of "big" is 2, want a number in [0,1]', 'Line 6: not a JSON object']);

  // A good upload: progress, then the built index.
  const good = path.join(work, 'good.jsonl');
  fs.writeFileSync(good, lines(400));
  await page.getByLabel('Labelled prompts (JSON lines)').setInputFiles(good);
  await page.getByRole('button', { name: 'Upload' }).click();
  const accepted = await waitFor('upload accepted', async () => {
    const tx = (await page.locator('#upload-result').textContent()) || '';
    return /Accepted/.test(tx) ? tx : false;
  });
  assert.match(accepted, /Accepted 400 of 400 lines/);
  assert.match(accepted, /gpt-x \(200 lines\)/);
  await waitFor('index ready', async () => /Ready/.test(await page.locator('#quality-state').textContent()), { timeoutMs: 60_000 });
  const rows = await page.locator('#quality-models-table tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent.trim())));
  assert.deepEqual(rows.map((r) => r.slice(0, 2)), [['big', '400'], ['small', '400']]);
  // No request routed yet: the router has no estimate source to report.
  assert.deepEqual(rows.map((r) => r[4]), ['not routed yet', 'not routed yet']);
  assert.match(await page.locator('#quality-status').textContent(), /Validation AUC\s*\d\.\d{3}/);
  await waitFor('Q̂ chart drawn', async () => (await page.locator('#quality-chart .uplot').count()) > 0, { timeoutMs: 20_000 });

  // Judge settings: a bad sample rate is refused next to its field; a good one saves.
  w.expect('PUT', /\/quality-judge$/, 400);
  await page.getByLabel('Judge sampled answers with one of my models').check();
  await page.getByLabel('Judge model').selectOption('big');
  await page.getByLabel('Sample rate').fill('1.5');
  await page.getByRole('button', { name: 'Save judge settings' }).click();
  await waitFor('sample rate error', async () => /\S/.test((await page.locator('.field:has([name="judge-rate"]) .field-error').textContent()) || ''));
  await page.getByLabel('Sample rate').fill('0.2');
  await page.getByLabel('Monthly judge budget ($)').fill('5');
  await page.getByRole('button', { name: 'Save judge settings' }).click();
  await waitFor('judge saved', async () => {
    const j = await api(page, base, `/clusters/${cid}/quality-judge`);
    return j.settings.enabled && j.settings.model === 'big' && j.settings.sample_rate === 0.2 && j.settings.monthly_budget_usd === 5;
  });
  // A refresh already under way when the PUT answered may draw the old settings once; the next shows the budget.
  await waitFor('judge spend shows the budget', async () => /of \$5/.test((await page.locator('#judge-spend').textContent()) || ''), { timeoutMs: 15_000 });

  const layout = await shoot(page, 'quality');
  assert.deepEqual(layout, [], 'layout overflow or unlabelled controls');
  assert.deepEqual(w.check(), [], 'console errors or unexpected failed requests');
});
