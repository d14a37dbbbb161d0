// pages/requests.js: the request log — every metered request, newest
// first, filtered by period, model, key and status (GET /api/v1/requests,
// cursor-paged with "Load more"), a CSV export with the same filters
// (GET /api/v1/requests.csv) and a detail drawer with the routing
// decision: where it went, what was predicted against what happened, the
// weights and preset, relaxed filters and fail-over attempts.

import { h, replace, fmtInt, fmtMs, fmtUSD, fmtQ, id } from '../dom.js';
import { list } from '../api.js';
import { rangePicker } from '../range.js';
import { csvLink } from '../csv.js';
import { loadClusters, fetchUsage } from '../data.js';
import { display } from '../triangle.js';

const PAGE = 50;
const STATUSES = [['', 'Any status'], ['ok', 'OK'], ['error', 'Error'], ['cancelled', 'Cancelled'], ['budget', 'Cut by budget']];
const RELAXED = {
  ttft: 'TTFT SLO', tpot: 'TPOT SLO', e2e: 'E2E SLO', quality: 'quality floor', budget: 'cost budget', cost: 'cost budget',
};

export function render(ctx) {
  const picker = rangePicker({ choices: ['24h', '7d', '30d', 'month'], initial: '24h', onChange: () => reload() });
  const modelSel = h('select', { id: id('rq-model') }, h('option', { value: '' }, 'All models'));
  const keySel = h('select', { id: id('rq-key') }, h('option', { value: '' }, 'All keys'));
  const statusSel = h('select', { id: id('rq-status') }, STATUSES.map(([v, l]) => h('option', { value: v }, l)));
  for (const s of [modelSel, keySel, statusSel]) s.addEventListener('change', () => reload());
  const exportSlot = h('span', {});
  const summary = h('p', { class: 'muted small', 'aria-live': 'polite' });
  const body = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  const more = h('button', { type: 'button', class: 'btn', hidden: true }, 'Load more');
  let cursor = '';
  let rows = [];
  let seq = 0;
  let keys = new Map();
  let instLabels = new Map();

  const filters = () => {
    const r = picker.value();
    if (!r) return null;
    return { from: r.from.toISOString(), to: r.to.toISOString(), model: modelSel.value, key_id: keySel.value, status: statusSel.value };
  };

  async function fetchPage(f, after) {
    const q = new URLSearchParams(Object.entries({ ...f, limit: PAGE, cursor: after }).filter(([, v]) => v !== '' && v !== undefined));
    return ctx.api.get(`/requests?${q}`);
  }

  async function reload() {
    const f = filters();
    if (!f) return;
    const my = ++seq;
    replace(exportSlot, csvLink(ctx, '/requests.csv', f, 'Export CSV'));
    let resp;
    try { resp = await fetchPage(f, ''); } catch (e) {
      if (ctx.signal.aborted || my !== seq) return;
      replace(body, e.notFound
        ? h('div', { class: 'unavailable' }, h('h2', {}, 'The request log is not available on this server'), h('p', {}, 'GET /api/v1/requests answered ', String(e.status), '.'))
        : h('p', { class: 'alert alert-error' }, `Could not load requests: ${e.message}`));
      more.hidden = true;
      return;
    }
    if (ctx.signal.aborted || my !== seq) return;
    rows = list(resp);
    cursor = resp.next_cursor || '';
    draw();
    refreshModels(f);
  }

  more.addEventListener('click', async () => {
    const f = filters();
    if (!f || !cursor) return;
    const my = seq;
    more.disabled = true;
    try {
      const resp = await fetchPage(f, cursor);
      if (my !== seq) return;
      rows = rows.concat(list(resp));
      cursor = resp.next_cursor || '';
      draw();
    } catch (e) {
      summary.textContent = `Could not load more: ${e.message}`;
    } finally { more.disabled = false; }
  });

  // The model filter offers the models that served requests in the period.
  async function refreshModels(f) {
    try {
      const u = await fetchUsage(ctx.api, { from: new Date(f.from), to: new Date(f.to), groupBy: 'model' });
      const want = modelSel.value;
      const models = u.rows.map((r) => r.key).filter(Boolean);
      if (want && !models.includes(want)) models.push(want);
      replace(modelSel, h('option', { value: '' }, 'All models'), models.sort().map((m) => h('option', { value: m, selected: m === want }, m)));
    } catch { /* the filter keeps its options */ }
  }

  function draw() {
    more.hidden = !cursor;
    summary.textContent = rows.length
      ? `${fmtInt(rows.length)} request${rows.length === 1 ? '' : 's'} shown${cursor ? ' — more below' : ''}, newest first.`
      : '';
    if (!rows.length) {
      replace(body, h('div', { class: 'empty-state' }, h('p', { class: 'empty' }, 'No requests match these filters.'),
        h('p', { class: 'small muted' }, 'Requests appear here once they reach an instance; the ', h('a', { href: '/docs', 'data-link': true }, 'Docs'), ' page has snippets to send one.')));
      return;
    }
    replace(body, h('div', { class: 'table-wrap' }, h('table', { class: 'table cards', id: 'requests-table' },
      h('caption', { class: 'sr-only' }, 'Requests, newest first'),
      h('thead', {}, h('tr', {}, ['Started', 'Key', 'Model', 'Instance', 'Status', 'Tokens in / out', 'TTFT', 'E2E', 'Cost'].map((c, i) => h('th', { scope: 'col', class: i >= 5 ? 'num' : '' }, c)))),
      h('tbody', {}, rows.map(rowView)))));
  }

  function rowView(r) {
    const open = h('button', { type: 'button', class: 'linkish' }, fmtStarted(r.started_at));
    open.setAttribute('aria-label', `Details of request ${r.id}`);
    open.addEventListener('click', () => drawer(r));
    return h('tr', { class: 'clickable', dataset: { id: r.id } },
      h('td', { 'data-label': 'Started' }, open),
      h('td', { 'data-label': 'Key' }, keyLabel(r)),
      h('td', { 'data-label': 'Model' }, r.model || '—'),
      h('td', { 'data-label': 'Instance', class: 'small' }, instLabel(r.instance_id)),
      h('td', { 'data-label': 'Status' }, statusBadge(r)),
      h('td', { class: 'num', 'data-label': 'Tokens in / out' }, `${fmtInt(r.prompt_tokens)} / ${fmtInt(r.output_tokens)}`),
      h('td', { class: 'num', 'data-label': 'TTFT' }, r.ttft_ms > 0 ? fmtMs(r.ttft_ms) : '—'),
      h('td', { class: 'num', 'data-label': 'E2E' }, fmtMs(r.e2e_ms)),
      h('td', { class: 'num', 'data-label': 'Cost' }, fmtUSD(r.cost_usd)));
  }

  const keyLabel = (r) => {
    if (!r.key_id) return '—';
    const k = keys.get(r.key_id);
    return r.key_name || (k && k.name) || `…${r.key_id.slice(-6)}`;
  };
  const instLabel = (iid) => instLabels.get(iid) || (iid ? `…${iid.slice(-8)}` : '—');

  function drawer(r) {
    const titleId = id('drawer');
    const close = h('button', { type: 'button', class: 'btn btn-small', id: 'drawer-close' }, 'Close');
    const dl = (pairs) => h('dl', { class: 'kv' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
    const w = r.weights;
    const wd = w ? display(w) : null;
    const e2eDelta = r.predicted_e2e_ms > 0 && r.e2e_ms > 0 ? (r.e2e_ms - r.predicted_e2e_ms) / r.predicted_e2e_ms : null;
    const weightBars = w ? h('div', { class: 'wbars', role: 'img', 'aria-label': `weights quality ${wd.quality}, latency ${wd.latency}, cost ${wd.cost}` },
      [['quality', 'Quality'], ['latency', 'Latency'], ['cost', 'Cost']].map(([k, l], i) => {
        const fill = h('span', { class: `wbar-fill wbar-${i}` });
        fill.style.width = `${(w[k] * 100).toFixed(1)}%`;
        return h('div', { class: 'wbar' }, h('span', { class: 'wbar-label' }, l), h('span', { class: 'wbar-track' }, fill), h('b', {}, wd[k]));
      })) : h('p', { class: 'muted small' }, 'Not recorded (this request predates the request log).');
    const relaxed = (r.relaxed || []).length
      ? h('ol', { class: 'relaxed' }, r.relaxed.map((x) => h('li', {}, RELAXED[x] || x)))
      : h('span', {}, 'none — every filter held');
    const dlg = h('dialog', { class: 'drawer', 'aria-labelledby': titleId },
      h('div', { class: 'drawer-head' }, h('h2', { id: titleId }, 'Request details'), close),
      h('p', { class: 'mono small wrap-any' }, r.id),
      h('section', {}, h('h3', {}, 'Outcome'), dl([
        ['Status', h('span', {}, statusBadge(r), ` HTTP ${r.http_status || '—'}`)],
        ['Started', new Date(r.started_at).toLocaleString('en-US')],
        ['Key', keyLabel(r)],
        ['Tokens', `${fmtInt(r.prompt_tokens)} in, ${fmtInt(r.output_tokens)} out`],
        ['Time to first token', r.ttft_ms > 0 ? fmtMs(r.ttft_ms) : '—'],
        ['End to end', fmtMs(r.e2e_ms)],
        ['Instance cost', fmtUSD(r.cost_usd)],
        r.billed_usd !== undefined ? ['Billed', fmtUSD(r.billed_usd)] : null,
      ])),
      h('section', {}, h('h3', {}, 'Routing decision'), dl([
        ['Served by', h('span', {}, r.model || '—', h('br'), h('span', { class: 'muted small' }, instLabel(r.instance_id)))],
        ['Policy', r.policy || '—'],
        ['Preset', r.preset || (w ? 'custom' : '—')],
        ['Weights', weightBars],
        ['Predicted quality', r.predicted_quality > 0 ? fmtQ(r.predicted_quality) : '—'],
        ['Predicted E2E', r.predicted_e2e_ms > 0 ? h('span', {}, fmtMs(r.predicted_e2e_ms),
          e2eDelta !== null ? h('span', { class: Math.abs(e2eDelta) <= 0.3 ? 'delta good' : 'delta bad' }, ` — observed ${e2eDelta >= 0 ? '+' : '−'}${Math.abs(e2eDelta * 100).toFixed(1)} % vs predicted`) : null) : '—'],
        ['Relaxed filters', relaxed],
        ['Attempts', r.attempts > 1 ? `${r.attempts} (failed over after a refused connection)` : String(r.attempts || 1)],
      ])));
    const done = () => { dlg.close(); dlg.remove(); };
    close.addEventListener('click', done);
    dlg.addEventListener('cancel', (e) => { e.preventDefault(); done(); });
    dlg.addEventListener('click', (e) => { if (e.target === dlg) done(); }); // backdrop
    document.body.append(dlg);
    dlg.showModal();
    close.focus();
  }

  (async () => {
    try {
      const [ks, { clusters }] = await Promise.all([
        ctx.api.get('/keys').then((k) => list(k, 'keys')).catch(() => []),
        loadClusters(ctx.api),
      ]);
      keys = new Map(ks.map((k) => [k.id, k]));
      for (const k of ks) keySel.append(h('option', { value: k.id }, `${k.name} (${k.prefix}…)${k.revoked_at ? ' — revoked' : ''}`));
      for (const c of clusters) {
        const insts = list(await ctx.api.get(`/clusters/${encodeURIComponent(c.id)}/instances`), 'instances');
        for (const i of insts) instLabels.set(i.id, hostOf(i.base_url));
      }
    } catch { /* labels fall back to ids */ }
    if (!ctx.signal.aborted) reload();
  })();

  return h('section', { class: 'page' },
    h('div', { class: 'page-head' }, h('h1', {}, 'Requests'), picker.el),
    h('div', { class: 'panel' },
      h('div', { class: 'toolbar filters' },
        h('div', { class: 'inline-field' }, h('label', { for: modelSel.id }, 'Model'), modelSel),
        h('div', { class: 'inline-field' }, h('label', { for: keySel.id }, 'Key'), keySel),
        h('div', { class: 'inline-field' }, h('label', { for: statusSel.id }, 'Status'), statusSel),
        h('span', { class: 'spacer' }), exportSlot),
      summary, body, h('div', { class: 'actions' }, more)));
}

/** fmtStarted is a request's start to the second: "Dec 1, 10:16:33". */
function fmtStarted(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleString('en-US', { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
}

function statusBadge(r) {
  const cls = { ok: 'badge-on', error: 'badge-bad', cancelled: 'badge-off', budget: 'badge-warn' }[r.status] || 'badge-off';
  const label = { ok: 'ok', error: 'error', cancelled: 'cancelled', budget: 'cut by budget' }[r.status] || r.status || '—';
  return h('span', { class: `badge ${cls}` }, label);
}

function hostOf(u) {
  try { return new URL(u).host; } catch { return u || '?'; }
}
