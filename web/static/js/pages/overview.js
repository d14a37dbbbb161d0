// pages/overview.js: traffic, latency, spend and quality at a glance, from
// GET /api/v1/usage (group_by=hour|day|model|instance), refreshed every 15 s.

import { h, replace, fmtInt, fmtMs, fmtUSD, fmtNum } from '../dom.js';
import { list } from '../api.js';
import { timeChart, shareBars } from '../chart.js';
import { fetchUsage, bucketTime, monthStart, loadClusters } from '../data.js';

const RANGES = {
  '6h': { label: 'Last 6 hours', ms: 6 * 3600e3, groupBy: 'hour', slot: 3600e3 },
  '24h': { label: 'Last 24 hours', ms: 24 * 3600e3, groupBy: 'hour', slot: 3600e3 },
  '7d': { label: 'Last 7 days', ms: 7 * 86400e3, groupBy: 'day', slot: 86400e3 },
  '30d': { label: 'Last 30 days', ms: 30 * 86400e3, groupBy: 'day', slot: 86400e3 },
};
const REFRESH_MS = 15_000;

export function render(ctx) {
  const rangeSel = h('select', { id: 'ov-range' },
    Object.entries(RANGES).map(([k, r]) => h('option', { value: k, selected: k === '24h' }, r.label)));
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
    const r = RANGES[rangeSel.value];
    const to = new Date();
    const from = new Date(to.getTime() - r.ms);
    let series; let byModel; let byInst; let month; let settings = null;
    try {
      [series, byModel, byInst, month, settings] = await Promise.all([
        fetchUsage(ctx.api, { from, to, groupBy: r.groupBy }),
        fetchUsage(ctx.api, { from, to, groupBy: 'model' }),
        fetchUsage(ctx.api, { from, to, groupBy: 'instance' }),
        fetchUsage(ctx.api, { from: monthStart(to), to, groupBy: 'day' }),
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
    replace(body, view(r, series, byModel, byInst, month, budget, instLabels, [from.getTime(), to.getTime()], [monthStart(to).getTime(), to.getTime()]));
    status.textContent = `Updated ${new Date().toLocaleTimeString('en-US', { hour12: false })} · refreshes every ${REFRESH_MS / 1000} s`;
  }

  let stop = ctx.every(REFRESH_MS, refresh);
  rangeSel.addEventListener('change', () => { stop(); stop = ctx.every(REFRESH_MS, refresh); });

  return h('section', { class: 'page' },
    h('div', { class: 'page-head' },
      h('h1', {}, 'Overview'),
      h('div', { class: 'inline-field' }, h('label', { for: rangeSel.id }, 'Period'), rangeSel)),
    status, body);
}

/** cumulative turns daily billed amounts into a month-to-date running total. */
function cumulative(rows) {
  let sum = 0;
  return rows.map((x) => ({ t: bucketTime(x.key), y: x.billedUSD }))
    .filter((p) => !Number.isNaN(p.t))
    .sort((a, b) => a.t - b.t)
    .map((p) => { sum += p.y; return { t: p.t, y: sum }; });
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
    ? h('span', {}, `of ${fmtUSD(budget)} budget (${fmtNum(pct * 100, 0)} %)`, meter)
    : h('span', {}, 'no monthly budget set — ', h('a', { href: '/routing', 'data-link': true }, 'set one'));
  const pts = (f) => series.rows.map((x) => ({ t: bucketTime(x.key), y: f(x) })).filter((p) => !Number.isNaN(p.t) && p.y !== null && p.y !== undefined);

  const stats = h('div', { class: 'stats' },
    stat('Requests', fmtInt(t.requests), r.label.toLowerCase()),
    t.p50E2E !== null ? stat('E2E latency p50', fmtMs(t.p50E2E), 'median end to end') : stat('E2E latency mean', fmtMs(t.meanE2E), 'end to end'),
    stat('E2E latency p95', fmtMs(t.p95E2E), '95th percentile'),
    stat('Time to first token', fmtMs(t.p50TTFT ?? t.meanTTFT), `${t.p50TTFT !== null ? 'median' : 'mean'}; p95 ${fmtMs(t.p95TTFT)}`),
    stat('Spend this month', fmtUSD(spend), spendSub),
    stat('Mean predicted quality', t.quality === null ? '—' : fmtNum(t.quality, 3), 'scheduler’s estimate Q̂ of the served model'));

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
      h('div', { class: 'panel' }, timeChart({ kind: 'bar', caption: 'Requests', slotMs: r.slot, domain, integer: true, yFormat: (v) => fmtInt(v), series: [{ name: 'requests', points: pts((x) => x.requests) }] })),
      h('div', { class: 'panel' }, timeChart({
        kind: 'line', caption: 'Latency', slotMs: r.slot, domain, yFormat: fmtMs,
        series: [
          { name: series.totals.p50E2E !== null ? 'E2E p50' : 'E2E mean', points: pts((x) => x.p50E2E ?? x.meanE2E) },
          { name: 'E2E p95', points: pts((x) => x.p95E2E) },
          { name: series.totals.p50TTFT !== null ? 'TTFT p50' : 'TTFT mean', points: pts((x) => x.p50TTFT ?? x.meanTTFT) },
        ],
      })),
      h('div', { class: 'panel' }, timeChart({
        kind: 'line', caption: 'Spend this month against the budget', domain: monthDomain, slotMs: 86400e3, yFormat: fmtUSD,
        ref: budget > 0 ? { y: budget, label: `monthly budget ${fmtUSD(budget)}` } : null,
        series: [{ name: 'month-to-date spend (billed)', points: cumulative(month.rows) }],
      })),
      h('div', { class: 'panel' }, timeChart({ kind: 'line', caption: 'Mean predicted quality', slotMs: r.slot, domain, yFormat: (v) => fmtNum(v, 2), series: [{ name: 'quality', points: pts((x) => x.quality) }] })),
      h('div', { class: 'panel' }, shareBars(byModel.rows.map((x) => ({ label: x.key || '(unknown)', value: x.requests })), { caption: 'Traffic share per model', format: (v) => `${fmtInt(v)} req` })),
      h('div', { class: 'panel' }, shareBars(instItems, { caption: 'Traffic share per instance', format: (v) => `${fmtInt(v)} req` }))));
}
