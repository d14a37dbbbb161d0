// browser.mjs: Debian's Chromium driven by playwright-core (no browser
// download), with the flags this machine needs and a fresh profile, plus a
// recorder of console errors, page errors and failed API responses.

import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { tempDir } from './procs.mjs';

/** CHROMIUM is the browser binary (override with CHROMIUM_PATH). */
export const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';

/** chromiumMissing says why the browser cannot run, or '' when it can. */
export function chromiumMissing() {
  return fs.existsSync(CHROMIUM) ? '' : `${CHROMIUM} not found (apt-get install -y chromium)`;
}

/** launch starts headless Chromium with a new empty profile directory. */
export async function launch() {
  const profile = tempDir('rb-e2e-profile-');
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1440, height: 900 },
  });
  return {
    context,
    async close() {
      await context.close();
      fs.rmSync(profile, { recursive: true, force: true });
    },
  };
}

/**
 * watch records what went wrong in a page: uncaught exceptions, console
 * errors, and HTTP responses >= 400. Tests declare the failures they cause
 * on purpose with expect(method, pathRegExp, status); anything else fails
 * the run in check().
 */
export function watch(page) {
  const problems = [];
  const failed = [];
  const expected = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    // Chromium logs every HTTP error response as "Failed to load resource";
    // those are judged by the response list below.
    if (/Failed to load resource: the server responded with a status of \d+/.test(m.text())) return;
    problems.push(`console error: ${m.text()}`);
  });
  page.on('response', (r) => {
    if (r.status() < 400) return;
    const u = new URL(r.url());
    failed.push({ method: r.request().method(), path: u.pathname, status: r.status() });
  });
  return {
    expect(method, re, status) { expected.push({ method, re, status }); },
    check() {
      const unexpected = failed.filter((f) => !expected.some((e) => e.method === f.method && e.re.test(f.path) && e.status === f.status));
      return [...problems, ...unexpected.map((f) => `unexpected HTTP ${f.status} for ${f.method} ${f.path}`)];
    },
  };
}

/** SHOTS is where screenshots go (git-ignored). */
export const SHOTS = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..', 'screenshots');

/**
 * shoot saves full-page screenshots of the current page at 1440 and 375 px
 * and reports a page wider than the viewport (broken layout) or a form
 * control without an accessible name.
 */
export async function shoot(page, name) {
  fs.mkdirSync(SHOTS, { recursive: true });
  const out = [];
  // Every visible form control needs an accessible name: a <label>, an
  // aria-label/-labelledby, or (buttons) its text.
  const unlabelled = await page.evaluate(() => [...document.querySelectorAll('input, select, textarea, button')]
    .filter((el) => el.type !== 'hidden' && el.getClientRects().length > 0)
    .filter((el) => {
      const label = el.labels && [...el.labels].map((l) => l.textContent.trim()).join('');
      return !(label || el.getAttribute('aria-label') || el.getAttribute('aria-labelledby') || (el.tagName === 'BUTTON' && el.textContent.trim()));
    })
    .map((el) => el.outerHTML.slice(0, 120)));
  for (const u of unlabelled) out.push(`${name}: control without a label: ${u}`);
  for (const width of [1440, 375]) {
    await page.setViewportSize({ width, height: width > 1000 ? 900 : 812 });
    // A transient toast would cover content in a full-page picture.
    await page.evaluate(() => { window.scrollTo(0, 0); document.getElementById('toast')?.classList.remove('show'); });
    await page.waitForTimeout(250); // let ResizeObserver redraw charts
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    if (overflow > 1) out.push(`${name} at ${width}px is ${overflow}px wider than the viewport`);
    await page.screenshot({ path: path.join(SHOTS, `${name}-${width}.png`), fullPage: true });
  }
  await page.setViewportSize({ width: 1440, height: 900 });
  return out;
}
