// units.test.mjs: the dashboard's pure helpers, run under node without a
// browser — the simplex maths of the weight triangle, chart ticks and the
// JWT expiry reader the session uses to schedule refreshes.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { toPoint, fromPoint, snap, display, nudge } from '../static/js/triangle.js';
import { niceTicks, bucketTime, alignSeries, fillBuckets } from '../static/js/chart.js';
import { fmtMs, fmtUSD, fmtQ } from '../static/js/dom.js';
import { grouping, localDay } from '../static/js/range.js';
import { jwtExpiry } from '../static/js/session.js';
import { kindFor } from '../static/js/kind.js';

const sum = (w) => w.quality + w.latency + w.cost;

test('display always shows weights that add up to exactly 1', () => {
  const cases = [
    [{ quality: 1 / 3, latency: 1 / 3, cost: 1 / 3 }, { quality: '0.34', latency: '0.33', cost: '0.33' }],
    [{ quality: 0.8, latency: 0.1, cost: 0.1 }, { quality: '0.80', latency: '0.10', cost: '0.10' }],
    [{ quality: 0.125, latency: 0.125, cost: 0.75 }, { quality: '0.13', latency: '0.12', cost: '0.75' }],
    [{ quality: 0, latency: 0, cost: 1 }, { quality: '0.00', latency: '0.00', cost: '1.00' }],
  ];
  for (const [w, want] of cases) {
    const got = display(w);
    assert.deepEqual(got, want);
    assert.equal(Number(got.quality) * 100 + Number(got.latency) * 100 + Number(got.cost) * 100, 100);
  }
  for (let i = 0; i < 500; i++) {
    const a = Math.random(); const b = Math.random() * (1 - a);
    const d = display({ quality: a, latency: b, cost: 1 - a - b }, 3);
    assert.equal(Math.round(Number(d.quality) * 1000 + Number(d.latency) * 1000 + Number(d.cost) * 1000), 1000);
  }
});

test('barycentric coordinates round-trip through the triangle', () => {
  for (const w of [{ quality: 0.6, latency: 0.2, cost: 0.2 }, { quality: 0, latency: 1, cost: 0 }, { quality: 0.25, latency: 0.5, cost: 0.25 }]) {
    const p = toPoint(w);
    const back = fromPoint(p.x, p.y);
    for (const k of ['quality', 'latency', 'cost']) assert.ok(Math.abs(back[k] - w[k]) < 1e-9, `${k}: ${back[k]} vs ${w[k]}`);
  }
  // A point outside the triangle is projected onto it: weights stay >= 0 and sum to 1.
  const out = fromPoint(-500, 900);
  assert.ok(out.quality >= 0 && out.latency >= 0 && out.cost >= 0);
  assert.ok(Math.abs(sum(out) - 1) < 1e-12);
  assert.ok(out.latency > 0.9, `far bottom-left lands near the latency corner: ${JSON.stringify(out)}`);
});

test('snap keeps the 0.01 grid and the simplex', () => {
  const s = snap({ quality: 0.333333, latency: 0.333333, cost: 0.333334 });
  assert.deepEqual(s, { quality: 0.33, latency: 0.33, cost: 0.34 });
  const edge = snap({ quality: 0.996, latency: 0.004, cost: 0 });
  assert.ok(edge.cost >= 0 && Math.abs(sum(edge) - 1) < 1e-12, JSON.stringify(edge));
});

test('keyboard steps move along the documented directions', () => {
  const w = { quality: 0.4, latency: 0.3, cost: 0.3 };
  assert.deepEqual(nudge(w, 'ArrowUp', 0.1), { quality: 0.5, latency: 0.25, cost: 0.25 });
  assert.deepEqual(nudge(w, 'ArrowDown', 0.1), { quality: 0.3, latency: 0.35, cost: 0.35 });
  assert.deepEqual(nudge(w, 'ArrowLeft', 0.1), { quality: 0.4, latency: 0.4, cost: 0.2 });
  assert.deepEqual(nudge(w, 'ArrowRight', 0.1), { quality: 0.4, latency: 0.2, cost: 0.4 });
  assert.deepEqual(nudge({ quality: 0.95, latency: 0.05, cost: 0 }, 'ArrowUp', 0.1), { quality: 1, latency: 0, cost: 0 });
  assert.deepEqual(nudge({ quality: 0.5, latency: 0.5, cost: 0 }, 'ArrowLeft', 0.1), { quality: 0.5, latency: 0.5, cost: 0 });
  assert.equal(nudge(w, 'a', 0.1), null);
  const home = nudge(w, 'Home', 0.1);
  assert.ok(Math.abs(home.quality - 1 / 3) < 1e-12 && Math.abs(sum(home) - 1) < 1e-12);
});

test('nice ticks start at 0 and cover the maximum', () => {
  const cases = [[7, [0, 2, 4, 6, 8]], [100, [0, 25, 50, 75, 100]], [0.37, [0, 0.1, 0.2, 0.3, 0.4]], [0, [0, 1]]];
  for (const [max, want] of cases) assert.deepEqual(niceTicks(max, 4), want, `max ${max}`);
  // Counts get whole-number ticks.
  assert.deepEqual(niceTicks(8.4, 4, true), [0, 5, 10]);
  assert.deepEqual(niceTicks(3, 4, true), [0, 1, 2, 3]);
  assert.deepEqual(niceTicks(0.5, 4, true), [0, 1]);
});

test('jwtExpiry reads exp from the payload and tolerates junk', () => {
  const payload = Buffer.from(JSON.stringify({ exp: 1_900_000_000, sub: 'u' })).toString('base64url');
  assert.equal(jwtExpiry(`h.${payload}.s`), 1_900_000_000_000);
  assert.equal(jwtExpiry('not-a-jwt'), 0);
  assert.equal(jwtExpiry(`h.${Buffer.from('{"sub":"u"}').toString('base64url')}.s`), 0);
});

test('buckets are placed where their value holds', () => {
  const H = 3600e3;
  const start = Date.UTC(2026, 11, 1, 10);
  // A finished hour: its middle; the current hour: the middle of what has elapsed.
  assert.equal(bucketTime(start, H, start + 5 * H), start + H / 2);
  assert.equal(bucketTime(start, H, start + 20 * 60e3), start + 10 * 60e3);
  // A running total is known at the bucket's end, or now.
  assert.equal(bucketTime(start, 24 * H, start + 3 * H, 'end'), start + 3 * H);
  assert.equal(bucketTime(start, 24 * H, start + 30 * H, 'end'), start + 24 * H);
  assert.equal(bucketTime(start, H, start, 'center'), start + H / 2);
  assert.equal(bucketTime(start, 0, start + H), start);
});

test('series are aligned on the union of times; counts zero-filled per bucket', () => {
  const { ts, cols } = alignSeries([{ points: [{ t: 1, y: 5 }, { t: 3, y: 7 }] }, { points: [{ t: 2, y: 1 }] }]);
  assert.deepEqual(ts, [1, 2, 3]);
  assert.deepEqual(cols, [[5, null, 7], [null, 1, null]]);
  assert.deepEqual(alignSeries([{ points: [{ t: 1, y: 5 }] }, { points: [{ t: 2, y: 1 }] }], true).cols, [[5, 0], [0, 1]]);
  const H = 3600e3;
  const filled = fillBuckets([{ t: 2 * H, y: 4 }], 0.5 * H, 3.5 * H, H);
  assert.deepEqual(filled, [{ t: 0, y: 0 }, { t: H, y: 0 }, { t: 2 * H, y: 4 }, { t: 3 * H, y: 0 }]);
});

test('number formats keep significant digits', () => {
  assert.equal(fmtUSD(0), '$0.00');
  assert.equal(fmtUSD(12.345), '$12.35');
  assert.equal(fmtUSD(0.5), '$0.50');
  assert.equal(fmtUSD(0.123456), '$0.123');
  assert.equal(fmtUSD(0.0012), '$0.0012');
  assert.equal(fmtUSD(0.000301), '$0.000301');
  assert.equal(fmtUSD(-0.004), '-$0.004');
  assert.equal(fmtUSD(1234.5), '$1,234.50');
  assert.equal(fmtMs(0.4242), '0.424 ms');
  assert.equal(fmtMs(12.34), '12.3 ms');
  assert.equal(fmtMs(850.4), '850 ms');
  assert.equal(fmtMs(2314), '2.31 s');
  assert.equal(fmtMs(125000), '125 s');
  assert.equal(fmtMs(null), '—');
  assert.equal(fmtQ(0.5), '0.500');
});

test('the period picker buckets by hour up to three days', () => {
  assert.deepEqual(grouping(0, 3 * 86400e3), { groupBy: 'hour', slot: 3600e3 });
  assert.deepEqual(grouping(0, 3 * 86400e3 + 1), { groupBy: 'day', slot: 86400e3 });
  assert.ok(Number.isNaN(localDay('2026-13-45x')));
  assert.equal(new Date(localDay('2026-12-01')).getDate(), 1);
});

test('kindFor reads the kind a Test connection report states for a model', () => {
  // vLLM: model ids only, no kinds.
  assert.equal(kindFor({ model_ids: ['m'] }, 'm'), null);
  assert.equal(kindFor(null, 'm'), null);
  // Per-model kinds win over the report-wide one.
  const r = { model_ids: ['e', 'c'], model_kinds: { e: 'embedding', c: 'chat' } };
  assert.equal(kindFor(r, 'e'), 'embedding');
  assert.equal(kindFor(r, 'c'), 'chat');
  assert.equal(kindFor(r, 'other'), null);
  assert.equal(kindFor({ model_kinds: {}, kind: 'embedding' }, 'x'), 'embedding');
  // Anything but the two kinds is ignored.
  assert.equal(kindFor({ model_kinds: { m: 'rerank' }, kind: 'bogus' }, 'm'), null);
});
