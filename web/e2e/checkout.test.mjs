// checkout.test.mjs: the Usage & billing page on a server with Stripe
// configured (against stripe-mock): plan state is shown and "Subscribe with
// Stripe" asks the server for a Checkout session and sends the browser to
// its URL (intercepted here: the machine has no internet).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { buildBinary, startServer, startStripeMock, findStripeMock, tempDir, waitFor } from './lib/procs.mjs';
import { launch, watch, shoot, chromiumMissing } from './lib/browser.mjs';

const CI = process.env.CI === 'true' || process.env.CI === '1';
const missing = chromiumMissing();
const stripeBin = await findStripeMock();
const why = missing || (stripeBin ? '' : 'stripe-mock not installed (go install github.com/stripe/stripe-mock@v0.203.0)');

test('checkout button with Stripe configured (stripe-mock)', { skip: why && !CI ? why : false, timeout: 300_000 }, async (t) => {
  assert.equal(why, '', `CI needs chromium and stripe-mock: ${why}`);
  const work = tempDir('rb-e2e-stripe-');
  t.after(() => fs.rmSync(work, { recursive: true, force: true }));
  const bin = await buildBinary(work);
  const stripe = await startStripeMock(stripeBin);
  t.after(() => stripe.proc.stop());
  const srv = await startServer(bin, `${work}/data`, [
    '--stripe-secret-key', 'sk_test_123', '--stripe-price-id', 'price_123',
    '--stripe-webhook-secret', 'whsec_e2e', '--stripe-api-base', stripe.url,
  ]);
  t.after(() => srv.proc.stop());
  const base = srv.base;

  const browser = await launch();
  t.after(() => browser.close());
  const page = await browser.context.newPage();
  const w = watch(page);
  // Checkout lives on stripe.com; answer it here instead of the internet.
  const visited = [];
  await browser.context.route(/^https:\/\/([a-z0-9-]+\.)*stripe\.com\//, (route) => {
    visited.push(route.request().url());
    return route.fulfill({ status: 200, contentType: 'text/html', body: '<!doctype html><title>Stripe Checkout (intercepted)</title><p>checkout</p>' });
  });

  await page.goto(`${base}/signup`);
  await page.getByLabel('Name or organisation').fill('Paying Team');
  await page.getByLabel('Email').fill(`pay-${Date.now()}@example.com`);
  await page.getByLabel('Password').fill('correct-horse-42');
  await page.getByRole('button', { name: 'Create account' }).click();
  await page.waitForURL('**/cluster');
  await page.getByRole('link', { name: 'Usage & billing' }).click();
  await page.waitForURL('**/usage');
  const panel = await waitFor('the plan panel', async () => {
    const txt = (await page.locator('.panel:has(h2:text("Plan and billing"))').textContent()) || '';
    return /Spend this period/.test(txt) ? txt : false;
  });
  assert.doesNotMatch(panel, /Stripe is not configured/);
  const subscribe = page.getByRole('button', { name: 'Subscribe with Stripe' });
  await subscribe.waitFor();
  const layout = await shoot(page, 'usage-stripe');
  await subscribe.click();
  await page.waitForURL(/stripe\.com/);
  assert.equal(visited.length, 1, `one navigation to Stripe: ${visited}`);
  assert.match(visited[0], /^https:\/\//);
  assert.deepEqual(layout, []);
  assert.deepEqual(w.check(), []);
});
