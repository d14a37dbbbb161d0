// pages/usage.js: usage by day, model and key with totals (GET
// /api/v1/usage), the plan and subscription state (GET /api/v1/billing) and
// the Stripe checkout button (POST /api/v1/billing/checkout) when the
// operator configured Stripe.

import { h, replace, fmtInt, fmtMs, fmtUSD, fmtQ, toast } from '../dom.js';
import { list } from '../api.js';
import { fetchUsage } from '../data.js';
import { rangePicker } from '../range.js';
import { timeChart, shareBars } from '../chart.js';
import { csvLink } from '../csv.js';

export function render(ctx) {
  const picker = rangePicker({ choices: ['month', '7d', '30d'], initial: 'month', onChange: () => loadUsage(), selectId: 'usage-period' });
  const billingSlot = h('div', { class: 'panel' }, h('h2', {}, 'Plan and billing'), h('p', { class: 'muted' }, 'Loading…'));
  const usageSlot = h('div', { class: 'stack' }, h('p', { class: 'muted' }, 'Loading…'));
  loadBilling();
  loadUsage();

  async function loadBilling() {
    let b;
    try { b = await ctx.api.get('/billing'); } catch (e) {
      if (ctx.signal.aborted) return;
      replace(billingSlot, h('h2', {}, 'Plan and billing'), e.notFound
        ? h('p', { class: 'unavailable' }, 'Billing is not available on this server (GET /api/v1/billing answered 404). Usage below is still metered.')
        : h('p', { class: 'alert alert-error' }, `Could not load billing: ${e.message}`));
      return;
    }
    if (ctx.signal.aborted) return;
    replace(billingSlot, h('h2', {}, 'Plan and billing'), billingView(b || {}));
  }

  /**
   * billingView shows billing.Overview: stripe_configured, message, plan,
   * subscription_status, current_period_end, past_due_since, suspended,
   * period_start, period_end, usage (a usage row), spend_usd,
   * meter_events_sent, meter_events_pending.
   */
  function billingView(b) {
    const stripe = !!b.stripe_configured;
    const sub = b.subscription_status || 'none';
    const usage = b.usage || {};
    const day = (iso) => new Date(iso).toLocaleDateString('en-US', { timeZone: 'UTC', month: 'short', day: 'numeric', year: 'numeric' });
    const rows = [
      ['Plan', b.plan || 'none'],
      ['Subscription', sub + (b.suspended ? ' — inference suspended for non-payment' : '')],
      b.past_due_since ? ['Past due since', day(b.past_due_since)] : null,
      // period_end is exclusive: show the last day inside the period.
      ['Billing period', b.period_start ? `${day(b.period_start)} – ${b.period_end ? day(new Date(new Date(b.period_end).getTime() - 1).toISOString()) : 'now'}` : 'this calendar month (UTC)'],
      ['Spend this period', fmtUSD(b.spend_usd)],
      ['Requests this period', fmtInt(usage.requests || 0)],
      stripe ? ['Usage reported to Stripe', `${fmtInt(b.meter_events_sent || 0)} hourly meter events sent, ${fmtInt(b.meter_events_pending || 0)} waiting`] : null,
    ].filter(Boolean);
    const dl = h('dl', { class: 'kv' }, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
    const back = new URLSearchParams(location.search).get('checkout');
    const backNote = back === 'success'
      ? h('p', { class: 'alert alert-ok' }, 'Checkout finished. The subscription shows as active once Stripe confirms it (a few seconds).')
      : back === 'cancelled' ? h('p', { class: 'alert alert-warn' }, 'Checkout was cancelled; nothing was charged.') : null;
    if (!stripe) {
      let more = (b.message || '').replace(/^stripe is not configured on this server[.:]?\s*/i, '');
      more = more ? more.charAt(0).toUpperCase() + more.slice(1) : 'Usage is metered and shown here, but nothing is charged.';
      return h('div', {}, dl, h('p', { class: 'note', id: 'stripe-note' }, h('strong', {}, 'Stripe is not configured on this server. '),
        more, ' There is no checkout until the operator configures it.'));
    }
    const active = ['active', 'trialing'].includes(String(sub).toLowerCase());
    const btn = h('button', { type: 'button', class: 'btn btn-primary' }, active ? 'Open Stripe Checkout again' : 'Subscribe with Stripe');
    const err = h('p', { class: 'form-error', role: 'alert' });
    btn.addEventListener('click', async () => {
      btn.disabled = true; err.textContent = '';
      try {
        const r = await ctx.api.post('/billing/checkout', {
          success_url: `${location.origin}/usage?checkout=success`,
          cancel_url: `${location.origin}/usage?checkout=cancelled`,
        });
        const url = r && r.url;
        if (!url || !/^https?:\/\//.test(url)) throw new Error('the server returned no checkout URL');
        toast('Opening Stripe Checkout…');
        window.location.assign(url);
      } catch (e) {
        err.textContent = `Could not start checkout: ${e.message}`;
        btn.disabled = false;
      }
    });
    return h('div', {}, backNote, dl, b.message ? h('p', { class: 'muted small' }, b.message) : null, err,
      active ? null : h('div', { class: 'actions' }, btn));
  }

  async function loadUsage() {
    const r = picker.value();
    if (!r) return;
    const { from, to } = r;
    let byDay; let byModel; let byKey; let keys = [];
    try {
      [byDay, byModel, byKey, keys] = await Promise.all([
        fetchUsage(ctx.api, { from, to, groupBy: 'day' }),
        fetchUsage(ctx.api, { from, to, groupBy: 'model' }),
        fetchUsage(ctx.api, { from, to, groupBy: 'key' }),
        ctx.api.get('/keys').then((k) => list(k, 'keys')).catch(() => []),
      ]);
    } catch (e) {
      if (ctx.signal.aborted) return;
      replace(usageSlot, e.notFound
        ? h('div', { class: 'panel unavailable' }, h('h2', {}, 'Usage is not available on this server'), h('p', {}, 'GET /api/v1/usage answered 404.'))
        : h('p', { class: 'alert alert-error' }, `Could not load usage: ${e.message}`));
      return;
    }
    if (ctx.signal.aborted) return;
    const keyName = new Map(keys.map((k) => [k.id, `${k.name} (${k.prefix}…)${k.revoked_at ? ' — revoked' : ''}`]));
    const keyLabel = (x) => keyName.get(x.key) || x.label || (x.key ? x.key : '(no key)');
    // Day buckets are UTC days (the billing period is in UTC).
    const dayFrom = Date.UTC(from.getUTCFullYear(), from.getUTCMonth(), from.getUTCDate());
    const dayPts = (f) => byDay.rows.map((x) => ({ t: Date.parse(x.key), y: f(x) })).filter((p) => !Number.isNaN(p.t));
    const domain = [dayFrom, to.getTime()];
    const charts = h('div', { class: 'grid2' },
      h('div', { class: 'panel' }, timeChart({ kind: 'bar', caption: 'Requests per day (UTC)', slotMs: 86400e3, domain, integer: true, zeroFill: true, yFormat: fmtInt, series: [{ name: 'requests', points: dayPts((x) => x.requests) }] })),
      h('div', { class: 'panel' }, timeChart({ kind: 'bar', caption: 'Billed per day (UTC)', slotMs: 86400e3, domain, zeroFill: true, yFormat: fmtUSD, series: [{ name: 'billed', points: dayPts((x) => x.billedUSD), color: '#1f9e89' }] })),
      h('div', { class: 'panel' }, shareBars(byModel.rows.map((x) => ({ label: x.key || '(unknown)', value: x.requests })), { caption: 'Requests by model', format: (v) => `${fmtInt(v)} req` })),
      h('div', { class: 'panel' }, shareBars(byModel.rows.map((x) => ({ label: x.key || '(unknown)', value: x.billedUSD })), { caption: 'Spend by model', format: fmtUSD, empty: 'Nothing billed in this period.' })),
      h('div', { class: 'panel' }, shareBars(byKey.rows.map((x) => ({ label: keyLabel(x), value: x.requests })), { caption: 'Requests by API key', format: (v) => `${fmtInt(v)} req` })),
      h('div', { class: 'panel' }, shareBars(byKey.rows.map((x) => ({ label: keyLabel(x), value: x.billedUSD })), { caption: 'Spend by API key', format: fmtUSD, empty: 'Nothing billed in this period.' })));
    const q = { from: from.toISOString(), to: to.toISOString() };
    replace(usageSlot,
      h('div', { class: 'toolbar' }, h('span', { class: 'muted small' }, `${r.label}: ${fmtInt(byDay.totals.requests)} requests, ${fmtUSD(byDay.totals.billedUSD)} billed`),
        h('span', { class: 'spacer' }),
        csvLink(ctx, '/usage.csv', { ...q, group_by: 'day' }, 'CSV by day'),
        csvLink(ctx, '/usage.csv', { ...q, group_by: 'model' }, 'CSV by model'),
        csvLink(ctx, '/usage.csv', { ...q, group_by: 'key' }, 'CSV by key')),
      charts,
      usageTable('By day', 'Day', byDay, (x) => { const t = Date.parse(x.key); return Number.isNaN(t) ? x.key : new Date(t).toLocaleDateString('en-US', { timeZone: 'UTC', month: 'short', day: 'numeric', weekday: 'short' }); }),
      usageTable('By model', 'Model', byModel, (x) => x.key || '(unknown)'),
      usageTable('By API key', 'Key', byKey, keyLabel));
  }

  return h('section', { class: 'page' },
    h('div', { class: 'page-head' }, h('h1', {}, 'Usage & billing'), picker.el),
    billingSlot, usageSlot);
}

function usageTable(title, first, { rows, totals }, label) {
  const cols = ['Requests', 'Input tokens', 'Output tokens', 'Instance cost', 'Billed', 'Mean E2E', 'p95 E2E', 'Mean quality'];
  const cells = (r) => [fmtInt(r.requests), fmtInt(r.promptTokens), fmtInt(r.outputTokens), fmtUSD(r.costUSD), fmtUSD(r.billedUSD),
    fmtMs(r.meanE2E), fmtMs(r.p95E2E), fmtQ(r.quality)].map((c) => h('td', { class: 'num' }, c));
  return h('div', { class: 'panel' }, h('h2', {}, title),
    rows.length ? h('div', { class: 'table-wrap' }, h('table', { class: 'table usage-table' },
      h('caption', { class: 'sr-only' }, `Usage ${title.toLowerCase()}`),
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, first), cols.map((c) => h('th', { scope: 'col', class: 'num' }, c)))),
      h('tbody', {}, rows.map((r) => h('tr', {}, h('th', { scope: 'row' }, label(r)), cells(r)))),
      h('tfoot', {}, h('tr', {}, h('th', { scope: 'row' }, 'Total'), cells(totals)))))
      : h('p', { class: 'empty' }, 'No requests in this period.'));
}
