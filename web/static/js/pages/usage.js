// pages/usage.js: usage by day, model and key with totals (GET
// /api/v1/usage), the plan and subscription state (GET /api/v1/billing) and
// the Stripe checkout button (POST /api/v1/billing/checkout) when the
// operator configured Stripe.

import { h, replace, fmtInt, fmtMs, fmtUSD, fmtNum, toast } from '../dom.js';
import { list } from '../api.js';
import { fetchUsage, monthStart } from '../data.js';

const PERIODS = {
  month: { label: 'This month (billing period)', from: (now) => monthStart(now) },
  '7d': { label: 'Last 7 days', from: (now) => new Date(now.getTime() - 7 * 86400e3) },
  '30d': { label: 'Last 30 days', from: (now) => new Date(now.getTime() - 30 * 86400e3) },
};

export function render(ctx) {
  const periodSel = h('select', { id: 'usage-period' }, Object.entries(PERIODS).map(([k, p]) => h('option', { value: k }, p.label)));
  const billingSlot = h('div', { class: 'panel' }, h('h2', {}, 'Plan and billing'), h('p', { class: 'muted' }, 'Loading…'));
  const usageSlot = h('div', { class: 'stack' }, h('p', { class: 'muted' }, 'Loading…'));
  periodSel.addEventListener('change', loadUsage);
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
    const now = new Date();
    const from = PERIODS[periodSel.value].from(now);
    let byDay; let byModel; let byKey; let keys = [];
    try {
      [byDay, byModel, byKey, keys] = await Promise.all([
        fetchUsage(ctx.api, { from, to: now, groupBy: 'day' }),
        fetchUsage(ctx.api, { from, to: now, groupBy: 'model' }),
        fetchUsage(ctx.api, { from, to: now, groupBy: 'key' }),
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
    replace(usageSlot,
      usageTable('By day', 'Day', byDay, (r) => { const t = Date.parse(r.key); return Number.isNaN(t) ? r.key : new Date(t).toLocaleDateString('en-US', { timeZone: 'UTC', month: 'short', day: 'numeric', weekday: 'short' }); }),
      usageTable('By model', 'Model', byModel, (r) => r.key || '(unknown)'),
      usageTable('By API key', 'Key', byKey, (r) => keyName.get(r.key) || r.label || r.key || '(none)'));
  }

  return h('section', { class: 'page' },
    h('div', { class: 'page-head' }, h('h1', {}, 'Usage & billing'),
      h('div', { class: 'inline-field' }, h('label', { for: periodSel.id }, 'Period'), periodSel)),
    billingSlot, usageSlot);
}

function usageTable(title, first, { rows, totals }, label) {
  const cols = ['Requests', 'Input tokens', 'Output tokens', 'Instance cost', 'Billed', 'Mean E2E', 'p95 E2E', 'Mean quality'];
  const cells = (r) => [fmtInt(r.requests), fmtInt(r.promptTokens), fmtInt(r.outputTokens), fmtUSD(r.costUSD), fmtUSD(r.billedUSD),
    fmtMs(r.meanE2E), fmtMs(r.p95E2E), r.quality === null ? '—' : fmtNum(r.quality, 3)].map((c) => h('td', { class: 'num' }, c));
  return h('div', { class: 'panel' }, h('h2', {}, title),
    rows.length ? h('div', { class: 'table-wrap' }, h('table', { class: 'table usage-table' },
      h('caption', { class: 'sr-only' }, `Usage ${title.toLowerCase()}`),
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, first), cols.map((c) => h('th', { scope: 'col', class: 'num' }, c)))),
      h('tbody', {}, rows.map((r) => h('tr', {}, h('th', { scope: 'row' }, label(r)), cells(r)))),
      h('tfoot', {}, h('tr', {}, h('th', { scope: 'row' }, 'Total'), cells(totals)))))
      : h('p', { class: 'empty' }, 'No requests in this period.'));
}
