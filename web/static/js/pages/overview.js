// pages/overview.js: traffic, latency, spend and quality at a glance, from
// GET /api/v1/usage (group_by=hour|day|model|instance), refreshed every 15 s.

import { h, replace, fmtInt, fmtMs, fmtUSD, fmtQ } from '../dom.js';
import { list } from '../api.js';
import { timeChart, shareBars } from '../chart.js';
import { fetchUsage, bucketTime, monthStart, loadClusters } from '../data.js';
import { rangePicker } from '../range.js';

const REFRESH_MS = 15_000;

export function render(ctx) {
  const picker = rangePicker({ choices: ['6h', '24h', '7d', '30d'], initial: '24h', onChange: () => { stop(); stop = ctx.every(REFRESH_MS, refresh); } });
  const status = h('span', { class: 'muted small', 'aria-live': 'off' });
  const body = h('div', { class: 'stack' }, h('p', { class: 'muted' }, 'Loading…'));
  let instLabels = new Map();
  let labelsLoaded = false;

  async function labels() {
    if (labelsLoaded) return;
    labelsLoaded = true;
    try {
      const { clusters } = await loadClusters(ctx.api);
      for (const c of clusters) {
        const insts = list(await ctx.api.get(`/clusters/${encodeURIComponent(c.id)}/instances`), 'instances');
        // Host first: replicas of one model differ only there.
        for (const i of insts) instLabels.set(i.id, `${hostOf(i.base_url)} · ${i.model}`);
      }
    } catch { instLabels = new Map(); }
  }

  async function refresh() {
    const r = picker.value();
    if (!r) return;
    const { from, to } = r;
    let series; let byModel; let byInst; let month; let settings = null;
    try {
      [series, byModel, byInst, month, settings] = await Promise.all([
        fetchUsage(ctx.api, { from, to, groupBy: r.groupBy }),
        fetchUsage(ctx.api, { from, to, groupBy: 'model' }),
        fetchUsage(ctx.api, { from, to, groupBy: 'instance' }),
        fetchUsage(ctx.api, { from: monthStart(new Date()), to: new Date(), groupBy: 'day' }),
        ctx.api.get('/settings').catch(() => null),
        labels(),
      ]);
    } catch (e) {
      if (ctx.signal.aborted) return;
      if (e.notFound) {
        replace(body, h('div', { class: 'panel unavailable' }, h('h2', {}, 'Usage data is not available on this server'),
          h('p', {}, 'This server does not answer ', h('code', {}, 'GET /api/v1/usage'), ' yet, so there is nothing to chart. Requests are still routed.')));
      } else {
        status.textContent = `Could not refresh: ${e.message}`;
      }
      return;
    }
    if (ctx.signal.aborted) return;
    const budget = settings && settings.slo ? Number(settings.slo.monthly_budget_usd) || 0 : 0;
    const now = Date.now();
    replace(body, view(r, series, byModel, byInst, month, budget, instLabels, [from.getTime(), to.getTime()], [monthStart(new Date(now)).getTime(), now]));
    status.textContent = `Updated ${new Date().toLocaleTimeString('en-US', { hour12: false })} · refreshes every ${REFRESH_MS / 1000} s`;
  }

  let stop = ctx.every(REFRESH_MS, refresh);

  return h('section', { class: 'page' },
    h('div', { class: 'page-head' }, h('h1', {}, 'Overview'), picker.el),
    status, body);
}

/**
 * cumulative turns daily billed amounts into a month-to-date running total
 * that starts at 0 at the month's start; each day's total is drawn where
 * it is known — the day's end, or now for today.
 */
function cumulative(rows, monthFrom, now) {
  let sum = 0;
  const pts = [{ t: monthFrom, y: 0 }];
  rows.map((x) => ({ t: bucketTime(x.key), y: x.billedUSD }))
    .filter((p) => !Number.isNaN(p.t))
    .sort((a, b) => a.t - b.t)
    .forEach((p) => { sum += p.y; pts.push({ t: Math.min(p.t + 86400e3, now), y: sum }); });
  return pts;
}

function hostOf(u) {
  try { return new URL(u).host; } catch { return u || '?'; }
}

function stat(label, value, sub) {
  return h('div', { class: 'stat' }, h('div', { class: 'stat-label' }, label), h('div', { class: 'stat-value' }, value),
    sub ? h('div', { class: 'stat-sub' }, sub) : null);
}

function view(r, series, byModel, byInst, month, budget, instLabels, domain, monthDomain) {
  const t = series.totals;
  const spend = month.totals.billedUSD;
  const pct = budget > 0 ? spend / budget : 0;
  const meter = h('div', { class: 'meter', role: 'meter', 'aria-valuemin': 0, 'aria-valuemax': budget || 1, 'aria-valuenow': spend, 'aria-label': 'Spend against monthly budget' });
  const fill = h('span', { class: pct >= 1 ? 'meter-fill over' : pct >= 0.8 ? 'meter-fill warn' : 'meter-fill' });
  fill.style.width = `${Math.min(100, pct * 100).toFixed(1)}%`;
  meter.append(fill);
  const spendSub = budget > 0
    ? h('span', {}, `of ${fmtUSD(budget)} budget (${(pct * 100).toFixed(1)} %)`, meter)
    : h('span', {}, 'no monthly budget set — ', h('a', { href: '/routing', 'data-link': true }, 'set one'));
  const pts = (f) => series.rows.map((x) => ({ t: bucketTime(x.key), y: f(x) })).filter((p) => !Number.isNaN(p.t) && p.y !== null && p.y !== undefined);

  const stats = h('div', { class: 'stats' },
    stat('Requests', fmtInt(t.requests), r.custom ? r.label : r.label.toLowerCase()),
    t.p50E2E !== null ? stat('E2E latency p50', fmtMs(t.p50E2E), 'median end to end') : stat('E2E latency mean', fmtMs(t.meanE2E), 'end to end'),
    stat('E2E latency p95', fmtMs(t.p95E2E), '95th percentile'),
    stat('Time to first token', fmtMs(t.p50TTFT ?? t.meanTTFT), `${t.p50TTFT !== null ? 'median' : 'mean'}; p95 ${fmtMs(t.p95TTFT)}`),
    stat('Spend this month', fmtUSD(spend), spendSub),
    stat('Mean predicted quality', fmtQ(t.quality), 'scheduler’s estimate Q̂ of the served model'));

  if (!t.requests) {
    return h('div', { class: 'stack' }, stats, h('div', { class: 'panel empty-state' },
      h('h2', {}, 'No requests in this period'),
      h('p', {}, 'Register an instance on the ', h('a', { href: '/cluster', 'data-link': true }, 'Cluster'), ' page, create an ',
        h('a', { href: '/keys', 'data-link': true }, 'API key'), ' and send a request — the ',
        h('a', { href: '/docs', 'data-link': true }, 'Docs'), ' page has snippets to paste.')));
  }
  const instItems = byInst.rows.map((x) => ({ label: instLabels.get(x.key) || x.label || x.key || '(unknown)', value: x.requests }));
  return h('div', { class: 'stack' }, stats,
    h('div', { class: 'grid2' },
      h('div', { class: 'panel' }, timeChart({ kind: 'bar', caption: 'Requests', slotMs: r.slot, domain, integer: true, zeroFill: true, yFormat: (v) => fmtInt(v), series: [{ name: 'requests', points: pts((x) => x.requests) }] })),
      h('div', { class: 'panel' }, timeChart({
        kind: 'line', caption: 'Latency', slotMs: r.slot, domain, yFormat: fmtMs,
        series: [
          { name: series.totals.p50E2E !== null ? 'E2E p50' : 'E2E mean', points: pts((x) => x.p50E2E ?? x.meanE2E) },
          { name: 'E2E p95', points: pts((x) => x.p95E2E) },
          { name: series.totals.p50TTFT !== null ? 'TTFT p50' : 'TTFT mean', points: pts((x) => x.p50TTFT ?? x.meanTTFT) },
        ],
      })),
      h('div', { class: 'panel' }, timeChart({
        kind: 'line', area: true, caption: 'Spend this month against the budget', domain: monthDomain, place: 'start', yFormat: fmtUSD,
        ref: budget > 0 ? { y: budget, label: `monthly budget ${fmtUSD(budget)}` } : null,
        series: [{ name: 'month-to-date spend (billed)', points: month.rows.length ? cumulative(month.rows, monthDomain[0], monthDomain[1]) : [] }],
      })),
      h('div', { class: 'panel' }, timeChart({ kind: 'line', caption: 'Mean predicted quality', slotMs: r.slot, domain, yFormat: fmtQ, series: [{ name: 'quality', points: pts((x) => x.quality) }] })),
      h('div', { class: 'panel' }, shareBars(byModel.rows.map((x) => ({ label: x.key || '(unknown)', value: x.requests })), { caption: 'Traffic share per model', format: (v) => `${fmtInt(v)} req` })),
      h('div', { class: 'panel' }, shareBars(instItems, { caption: 'Traffic share per instance', format: (v) => `${fmtInt(v)} req` }))));
}
