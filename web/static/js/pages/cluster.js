// pages/cluster.js: the tenant's cluster — register instances (with a Test
// connection check before saving), edit, disable, delete, and a live table
// of each instance's routing state from GET /api/v1/clusters/{id}/state.

import { h, replace, field, toast, confirmDialog, fmtNum, fmtInt, fmtUSD, fmtMs } from '../dom.js';
import { list } from '../api.js';
import { clusterPage, rememberCluster } from '../data.js';
import { kindFor } from '../kind.js';
import { autopilotView } from '../autopilot.js';

const STATE_MS = 3000;
// Used when the server has no GET /api/v1/catalog (its list is richer).
const GPUS = ['h100-80g', 'a100-80g', 'a100-40g', 'l40s-48g', 'a30-24g', 'a10g-24g', 'l4-24g', 'v100-32g', 't4-16g'].map((id) => ({ id, label: id }));

/** loadCatalog reads GET /api/v1/catalog: {gpus, models}. */
async function loadCatalog(ctx) {
  try {
    const c = await ctx.api.get('/catalog');
    return { gpus: c.gpus && c.gpus.length ? c.gpus : GPUS, models: c.models || [] };
  } catch { return { gpus: GPUS, models: [] }; }
}

export function render(ctx) {
  const { page, reload: load } = clusterPage(ctx, 'Cluster', (data) => (data.cluster ? clusterView(data) : createClusterPanel(true)));
  return page;

  function createClusterPanel(first) {
    const name = field('Cluster name', h('input', { name: 'cluster-name', required: true, maxlength: 100, value: first ? 'default' : '' }),
      { hint: 'A cluster is a set of inference servers that RouteBalance routes across.' });
    const btn = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Create cluster');
    const form = h('form', { class: 'form-row', novalidate: true }, name.el, h('div', { class: 'actions' }, btn));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      name.clear();
      const v = name.control.value.trim();
      if (!v) { name.setError('Enter a name.'); name.control.focus(); return; }
      btn.disabled = true;
      try {
        const c = await ctx.api.post('/clusters', { name: v });
        rememberCluster(c.id);
        toast(`Cluster “${c.name || v}” created.`);
        load();
      } catch (err) {
        name.setError(err.status === 409 ? 'A cluster with this name already exists.' : err.message);
        name.control.focus();
      } finally { btn.disabled = false; }
    });
    return h('div', { class: 'panel' }, h('h2', {}, first ? 'Create your first cluster' : 'New cluster'), form);
  }

  function clusterView({ clusters, cluster }) {
    const sel = h('select', { id: 'cluster-select' }, clusters.map((c) => h('option', { value: c.id, selected: c.id === cluster.id }, c.name || c.id)));
    sel.addEventListener('change', () => { rememberCluster(sel.value); load(); });
    const newBtn = h('button', { type: 'button', class: 'btn' }, 'New cluster');
    const delBtn = h('button', { type: 'button', class: 'btn btn-danger-ghost' }, 'Delete cluster');
    const newSlot = h('div', {});
    newBtn.addEventListener('click', () => { replace(newSlot, createClusterPanel(false)); newSlot.querySelector('input').focus(); });
    delBtn.addEventListener('click', async () => {
      if (!(await confirmDialog(`Delete cluster “${cluster.name}”?`, 'Its instances are removed and keys bound to it stop working. This cannot be undone.', 'Delete cluster'))) return;
      try {
        await ctx.api.del(`/clusters/${encodeURIComponent(cluster.id)}`);
        rememberCluster('');
        toast('Cluster deleted.');
        load();
      } catch (e) { toast(`Could not delete: ${e.message}`, 'error'); }
    });
    const cid = encodeURIComponent(cluster.id);
    const instSlot = h('div', {}, h('p', { class: 'muted' }, 'Loading instances…'));
    const formSlot = h('div', {});
    const stateSlot = h('div', {}, h('p', { class: 'muted' }, 'Loading live state…'));
    const addBtn = h('button', { type: 'button', class: 'btn btn-primary' }, 'Register instance');
    addBtn.addEventListener('click', () => openForm(null));
    let instances = [];

    function openForm(inst) {
      replace(formSlot, instanceForm(ctx, cid, inst, () => { replace(formSlot); addBtn.hidden = false; refreshInstances(); }, () => { replace(formSlot); addBtn.hidden = false; addBtn.focus(); }));
      addBtn.hidden = true;
      formSlot.querySelector('input').focus();
      formSlot.scrollIntoView({ block: 'nearest' });
    }

    async function refreshInstances() {
      try {
        instances = list(await ctx.api.get(`/clusters/${cid}/instances`), 'instances');
      } catch (e) {
        replace(instSlot, h('p', { class: 'alert alert-error' }, `Could not load instances: ${e.message}`));
        return;
      }
      if (ctx.signal.aborted) return;
      if (!instances.length) {
        replace(instSlot, h('p', { class: 'empty' }, 'No instances yet. Register the vLLM servers of this cluster — each one with its served model, GPU and prices.'));
        if (!formSlot.firstChild) openForm(null);
        return;
      }
      replace(instSlot, instanceTable(instances));
      drawState(); // label the live rows with what was just loaded
    }

    function instanceTable(insts) {
      return h('div', { class: 'table-wrap' }, h('table', { class: 'table cards', id: 'instances-table' },
        h('caption', { class: 'sr-only' }, 'Registered instances'),
        h('thead', {}, h('tr', {}, ['Base URL', 'Model', 'GPU', 'TP', 'In $/Mtok', 'Out $/Mtok', 'Max conc.', 'Status', ''].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, insts.map((i) => {
          const edit = h('button', { type: 'button', class: 'btn btn-small' }, 'Edit');
          edit.setAttribute('aria-label', `Edit ${i.model} at ${i.base_url}`);
          edit.addEventListener('click', () => openForm(i));
          const toggle = h('button', { type: 'button', class: 'btn btn-small' }, i.disabled ? 'Enable' : 'Disable');
          toggle.setAttribute('aria-label', `${i.disabled ? 'Enable' : 'Disable'} ${i.model} at ${i.base_url}`);
          toggle.addEventListener('click', async () => {
            toggle.disabled = true;
            try {
              await ctx.api.patch(`/clusters/${cid}/instances/${encodeURIComponent(i.id)}`, { disabled: !i.disabled });
              toast(i.disabled ? 'Instance enabled.' : 'Instance disabled: no new requests go to it.');
              refreshInstances();
            } catch (e) { toast(`Could not change it: ${e.message}`, 'error'); toggle.disabled = false; }
          });
          const del = h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost' }, 'Delete');
          del.setAttribute('aria-label', `Delete ${i.model} at ${i.base_url}`);
          del.addEventListener('click', async () => {
            if (!(await confirmDialog('Delete this instance?', `${i.model} at ${i.base_url} stops receiving requests. Usage history is kept.`, 'Delete instance'))) return;
            try {
              await ctx.api.del(`/clusters/${cid}/instances/${encodeURIComponent(i.id)}`);
              toast('Instance deleted.');
              refreshInstances();
            } catch (e) { toast(`Could not delete: ${e.message}`, 'error'); }
          });
          return h('tr', { class: i.disabled ? 'is-disabled' : '' },
            h('td', { class: 'mono wrap url-cell', 'data-label': 'Base URL' }, i.base_url), h('td', { 'data-label': 'Model' }, i.model, i.kind === 'embedding' ? [' ', h('span', { class: 'badge badge-kind', title: 'Serves /v1/embeddings' }, 'embedding')] : null), h('td', { 'data-label': 'GPU' }, i.gpu || '—'),
            h('td', { class: 'num', 'data-label': 'TP' }, i.tensor_parallel || 1),
            h('td', { class: 'num', 'data-label': 'In $/Mtok' }, fmtUSD(i.price_in_per_mtok)), h('td', { class: 'num', 'data-label': 'Out $/Mtok' }, fmtUSD(i.price_out_per_mtok)),
            h('td', { class: 'num', 'data-label': 'Max conc.' }, i.max_concurrency ? fmtInt(i.max_concurrency) : 'default'),
            h('td', { 'data-label': 'Status' }, i.disabled ? h('span', { class: 'badge badge-off' }, 'disabled') : h('span', { class: 'badge badge-on' }, 'enabled')),
            h('td', { class: 'row-actions' }, edit, toggle, del));
        }))));
    }

    const stateStatus = h('span', { class: 'muted small' });
    async function refreshState() {
      let st;
      try {
        st = await ctx.api.get(`/clusters/${cid}/state`);
      } catch (e) {
        if (ctx.signal.aborted) return;
        if (e.notFound) {
          replace(stateSlot, h('p', { class: 'unavailable' }, `Live state is not available on this server (GET /api/v1/clusters/{id}/state answered ${e.status}).`));
        } else {
          stateStatus.textContent = `Could not refresh: ${e.message}`;
        }
        return;
      }
      if (ctx.signal.aborted) return;
      // {cluster_id, live, state: [schedule.InstanceState] | null, instances: [registered]}
      lastState = st;
      drawState();
      stateStatus.textContent = `Updated ${new Date().toLocaleTimeString('en-US', { hour12: false })} · every ${STATE_MS / 1000} s`;
    }
    let lastState = null;
    function drawState() {
      const st = lastState;
      if (!st) return;
      const rows = Array.isArray(st.state) ? st.state : Array.isArray(st) ? st : [];
      replace(stateSlot, st.live === false
        ? h('p', { class: 'empty', id: 'state-none' }, 'No live state yet: the router builds its view of a cluster when the cluster routes its first request.')
        : stateTable(rows, instances));
    }

    // Autopilot: GET /api/v1/clusters/{id}/autopilot (web/README.md).
    const apSlot = h('div', { id: 'autopilot-slot' }, h('p', { class: 'muted' }, 'Loading…'));
    const apStatus = h('span', { class: 'muted small' });
    async function refreshAutopilot() {
      let r;
      try {
        r = await ctx.api.get(`/clusters/${cid}/autopilot`);
      } catch (e) {
        if (ctx.signal.aborted) return;
        if (e.notFound) replace(apSlot, h('p', { class: 'unavailable' }, `This server does not offer GET /api/v1/clusters/{id}/autopilot (${e.status}).`));
        else apStatus.textContent = `Could not refresh: ${e.message}`;
        return;
      }
      if (ctx.signal.aborted) return;
      replace(apSlot, autopilotView(r));
      apStatus.textContent = `Updated ${new Date().toLocaleTimeString('en-US', { hour12: false })}`;
    }

    refreshInstances();
    ctx.every(STATE_MS, refreshState);
    ctx.every(STATE_MS, refreshAutopilot);

    return h('div', { class: 'stack' },
      h('div', { class: 'toolbar' },
        h('div', { class: 'inline-field' }, h('label', { for: sel.id }, 'Cluster'), sel),
        h('span', { class: 'muted small mono' }, `id ${cluster.id}`),
        h('span', { class: 'spacer' }), h('a', { href: '/quality', 'data-link': true, class: 'btn' }, 'Quality data'), newBtn, delBtn),
      newSlot,
      h('div', { class: 'panel' },
        h('div', { class: 'panel-head' }, h('h2', {}, 'Instances'), addBtn),
        instSlot, formSlot),
      h('div', { class: 'panel' },
        h('div', { class: 'panel-head' }, h('h2', {}, 'Live state'), stateStatus),
        h('p', { class: 'muted small' }, 'What the router believes about each instance right now: health, requests in flight and queued, predicted decode tokens still pending, predicted time per output token (TPOT̂) and the age of the last /metrics scrape.'),
        stateSlot),
      h('div', { class: 'panel', id: 'autopilot-panel' },
        h('div', { class: 'panel-head' }, h('h2', {}, 'Autopilot'), apStatus),
        h('p', { class: 'muted small' }, 'Requests with preset autopilot give targets (p95 latency, optional cost) instead of weights; a controller per target set moves the weights every few seconds toward quality while the targets hold and back toward latency when a window misses.'),
        apSlot));
  }
}

function pick(o, ...names) {
  for (const n of names) if (o && o[n] !== undefined && o[n] !== null) return o[n];
  return undefined;
}

function stateTable(rows, instances) {
  if (!rows.length) return h('p', { class: 'empty' }, 'The router has no state for this cluster yet — it appears once an instance is registered and probed.');
  const byId = new Map(instances.map((i) => [i.id, i]));
  return h('div', { class: 'table-wrap' }, h('table', { class: 'table', id: 'state-table' },
    h('caption', { class: 'sr-only' }, 'Live instance state'),
    h('thead', {}, h('tr', {}, ['Instance', 'Health', 'In flight', 'Queue', 'Pending tokens', 'TPOT̂', 'KV cache', 'Served / failed', 'Last scrape', 'Estimates'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, rows.map((r) => {
      const idv = pick(r, 'instance_id', 'id');
      const inst = byId.get(idv);
      const healthy = pick(r, 'healthy');
      const health = pick(r, 'health', 'status');
      const ok = healthy !== undefined ? !!healthy : health === 'healthy' || health === 'ok' || health === true;
      const tpotMs = pick(r, 'tpot_ms');
      const ageMs = pick(r, 'scrape_age_ms');
      const stale = !!pick(r, 'stale');
      const label = inst ? `${inst.model} @ ${hostOf(inst.base_url)}` : (pick(r, 'model') ? `${pick(r, 'model')} (…${String(idv).slice(-6)})` : idv);
      const disabled = pick(r, 'disabled') || (inst && inst.disabled);
      const maxc = pick(r, 'max_concurrency');
      const kv = pick(r, 'kv_usage');
      let badge;
      if (disabled) badge = h('span', { class: 'badge badge-off' }, 'disabled');
      else if (!ok) badge = h('span', { class: 'badge badge-bad' }, typeof health === 'string' ? health : 'unhealthy');
      else if (pick(r, 'exploring')) badge = h('span', { class: 'badge badge-on', title: 'New instance: a few exploration requests before its latency model is trusted' }, 'healthy · exploring');
      else badge = h('span', { class: 'badge badge-on' }, 'healthy');
      return h('tr', {},
        h('td', {}, label),
        h('td', {}, badge),
        h('td', { class: 'num' }, fmtInt(pick(r, 'in_flight')), maxc ? h('span', { class: 'muted' }, ` / ${fmtInt(maxc)}`) : null),
        h('td', { class: 'num' }, fmtInt(pick(r, 'queue'))),
        h('td', { class: 'num' }, fmtInt(pick(r, 'pending_tokens'))),
        h('td', { class: 'num' }, tpotMs === undefined || tpotMs <= 0 ? '—' : `${fmtNum(tpotMs, 1)} ms`),
        h('td', { class: 'num' }, kv === undefined ? '—' : `${fmtNum(kv * 100, 0)} %`),
        h('td', { class: 'num' }, `${fmtInt(pick(r, 'served') ?? 0)} / ${fmtInt(pick(r, 'failed') ?? 0)}`),
        h('td', { class: 'num' }, ageMs === undefined || ageMs < 0 || (stale && ageMs === 0) ? 'never' : h('span', { class: stale ? 'stale' : '' }, fmtMs(ageMs), stale ? ' (stale)' : '')),
        h('td', {}, String(pick(r, 'estimate_source') || '—')));
    }))));
}

function hostOf(u) {
  try { return new URL(u).host; } catch { return u || '?'; }
}

/** instanceForm registers (inst = null) or edits an instance. */
function instanceForm(ctx, cid, inst, onSaved, onCancel) {
  const editing = !!inst;
  const v = inst || {};
  const num = (name, attrs) => h('input', { name, type: 'number', inputmode: 'decimal', ...attrs });
  const gpuList = h('datalist', { id: 'gpu-list' }, GPUS.map((g) => h('option', { value: g.id }, g.label)));
  const modelList = h('datalist', { id: 'model-list' });
  let catalog = { gpus: GPUS, models: [] };
  let served = []; // model ids from the last Test connection
  let report = null; // the last Test connection report
  const kindSel = h('select', { name: 'kind' },
    h('option', { value: 'chat' }, 'Chat (/v1/chat/completions, /v1/completions, /v1/responses)'),
    h('option', { value: 'embedding' }, 'Embedding (/v1/embeddings)'));
  kindSel.value = v.kind === 'embedding' ? 'embedding' : 'chat';
  const f = {
    base_url: field('Base URL', h('input', { name: 'base_url', type: 'url', required: true, placeholder: 'http://10.0.0.5:8000', value: v.base_url || '', autocomplete: 'off' }),
      { hint: 'The vLLM server’s OpenAI-compatible root (without /v1).', wide: true }),
    model: field('Served model name', h('input', { name: 'model', required: true, list: 'model-list', placeholder: 'Qwen/Qwen2.5-7B-Instruct', value: v.model || '', autocomplete: 'off' }), { hint: 'As vLLM reports it in /v1/models — Test connection lists them.' }),
    kind: field('Kind', kindSel, { hint: 'What the instance serves. Test connection fills it where the server says (vLLM’s /v1/models does not).' }),
    gpu: field('GPU type', h('input', { name: 'gpu', list: 'gpu-list', placeholder: 'a100-80g', value: v.gpu || '', autocomplete: 'off' }), { hint: 'Pick a known tier or type your own.' }),
    tensor_parallel: field('Tensor-parallel size', num('tensor_parallel', { min: 1, max: 64, step: 1, value: v.tensor_parallel || 1 })),
    price_in_per_mtok: field('Input price ($ per 1M tokens)', num('price_in_per_mtok', { min: 0, step: 'any', value: v.price_in_per_mtok ?? '' })),
    price_out_per_mtok: field('Output price ($ per 1M tokens)', num('price_out_per_mtok', { min: 0, step: 'any', value: v.price_out_per_mtok ?? '' })),
    max_concurrency: field('Max concurrency', num('max_concurrency', { min: 0, step: 1, value: v.max_concurrency || '' }), { hint: 'Requests in flight at once; empty = the router’s default.' }),
    quality_prior: field('Quality prior (0–1)', num('quality_prior', { min: 0, max: 1, step: 0.01, value: v.quality_prior || '' }), { hint: 'Predicted quality when no labels exist; empty = 0.5.' }),
    api_key: field('Upstream API key', h('input', { name: 'api_key', type: 'password', autocomplete: 'new-password', placeholder: editing && v.has_api_key ? '•••••• (stored — leave empty to keep)' : 'optional' }),
      { hint: 'Sent to the instance as a bearer token; stored encrypted and never shown again.' }),
  };
  const testBtn = h('button', { type: 'button', class: 'btn' }, 'Test connection');
  const saveBtn = h('button', { type: 'submit', class: 'btn btn-primary' }, editing ? 'Save changes' : 'Register instance');
  const cancelBtn = h('button', { type: 'button', class: 'btn btn-ghost' }, 'Cancel');
  const result = h('div', { class: 'test-result', 'aria-live': 'polite' });
  const suggest = h('div', { class: 'price-suggest', 'aria-live': 'polite' });
  const formErr = h('p', { class: 'form-error', role: 'alert' });
  cancelBtn.addEventListener('click', onCancel);

  const form = h('form', { class: 'instance-form', novalidate: true },
    h('h3', {}, editing ? `Edit ${v.model}` : 'Register an instance'),
    gpuList, modelList,
    h('div', { class: 'form-grid' }, Object.values(f).map((x) => x.el)),
    suggest,
    result, formErr,
    h('div', { class: 'actions' }, testBtn, saveBtn, cancelBtn));

  function values({ forTest = false } = {}) {
    for (const x of Object.values(f)) x.clear();
    formErr.textContent = '';
    const out = {};
    let bad = false;
    const url = f.base_url.control.value.trim();
    if (!url) { f.base_url.setError('Enter the server’s base URL.'); bad = true; }
    else {
      try {
        const u = new URL(url);
        if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('scheme');
      } catch { f.base_url.setError('Enter a full http:// or https:// URL.'); bad = true; }
    }
    out.base_url = url.replace(/\/+$/, '');
    out.model = f.model.control.value.trim();
    if (!out.model && !forTest) { f.model.setError('Enter the served model name (Test connection lists what the server serves).'); bad = true; }
    if (forTest) {
      const key = f.api_key.control.value;
      if (key) out.api_key = key;
      return bad ? null : out;
    }
    out.kind = f.kind.control.value;
    out.gpu = f.gpu.control.value.trim();
    const numv = (key, { int, min, max, dflt }) => {
      const raw = f[key].control.value.trim();
      if (raw === '') return dflt;
      const n = Number(raw);
      if (!Number.isFinite(n) || (int && !Number.isInteger(n)) || n < min || (max !== undefined && n > max)) {
        f[key].setError(`Enter ${int ? 'a whole number' : 'a number'} ${max !== undefined ? `from ${min} to ${max}` : `≥ ${min}`}.`);
        bad = true;
        return dflt;
      }
      return n;
    };
    out.tensor_parallel = numv('tensor_parallel', { int: true, min: 1, max: 64, dflt: 1 });
    out.price_in_per_mtok = numv('price_in_per_mtok', { min: 0, dflt: 0 });
    out.price_out_per_mtok = numv('price_out_per_mtok', { min: 0, dflt: 0 });
    out.max_concurrency = numv('max_concurrency', { int: true, min: 0, dflt: 0 });
    const qp = numv('quality_prior', { min: 0, max: 1, dflt: undefined });
    if (qp !== undefined) out.quality_prior = qp;
    const key = f.api_key.control.value;
    if (key) out.api_key = key;
    return bad ? null : out;
  }

  function fieldError(err) {
    const target = f[(err.param || '').replace(/^instance\./, '')];
    if (target) { target.setError(err.fieldMessage); target.control.focus(); } else formErr.textContent = err.message;
  }

  /** useModel fills the model field (and the suggestions that follow from it). */
  function useModel(id) {
    f.model.control.value = id;
    f.model.clear();
    applyKind();
    showSuggestion();
  }

  /** showSuggestion offers known prices and shape for the typed model (on the typed GPU if known). */
  function showSuggestion() {
    const model = f.model.control.value.trim();
    const gpu = f.gpu.control.value.trim().toLowerCase();
    const cands = catalog.models.filter((m) => m.model === model);
    const m = cands.find((c) => c.gpu === gpu) || cands[0];
    if (!m) { replace(suggest); return; }
    const apply = h('button', { type: 'button', class: 'btn btn-small' }, 'Use these');
    apply.addEventListener('click', () => {
      f.price_in_per_mtok.control.value = m.price_in_per_mtok;
      f.price_out_per_mtok.control.value = m.price_out_per_mtok;
      if (!f.gpu.control.value.trim()) f.gpu.control.value = m.gpu;
      if (!f.max_concurrency.control.value && m.max_concurrency) f.max_concurrency.control.value = m.max_concurrency;
      if ((f.tensor_parallel.control.value === '' || f.tensor_parallel.control.value === '1') && m.tensor_parallel > 1) f.tensor_parallel.control.value = m.tensor_parallel;
      toast('Filled in the suggested prices.');
    });
    replace(suggest, h('p', { class: 'note small', id: 'price-suggestion' },
      h('strong', {}, 'Suggested '), `for ${m.model} on ${m.gpu}`, m.source === 'yours' ? ' (as you registered it before)' : ' (the reference cluster shipped with RouteBalance)', ': ',
      `${fmtUSD(m.price_in_per_mtok)} in / ${fmtUSD(m.price_out_per_mtok)} out per 1M tokens`,
      m.tensor_parallel > 1 ? `, TP ${m.tensor_parallel}` : '', m.max_concurrency ? `, max concurrency ${m.max_concurrency}` : '', ' ', apply));
  }
  /** applyKind sets the kind the last Test connection stated for the typed model, if any. */
  function applyKind() {
    const k = kindFor(report, f.model.control.value.trim());
    if (k) f.kind.control.value = k;
  }
  f.model.control.addEventListener('input', showSuggestion);
  f.model.control.addEventListener('change', applyKind);
  f.gpu.control.addEventListener('change', showSuggestion);
  function fillModelList() {
    const ids = [...new Set([...served, ...catalog.models.map((m) => m.model)])];
    replace(modelList, ids.map((x) => h('option', { value: x })));
  }
  loadCatalog(ctx).then((c) => {
    catalog = c;
    replace(gpuList, c.gpus.map((g) => h('option', { value: g.id }, g.label)));
    fillModelList();
    showSuggestion();
  });

  testBtn.addEventListener('click', async () => {
    const body = values({ forTest: true });
    if (!body) { form.querySelector('[aria-invalid="true"]')?.focus(); return; }
    const req = { base_url: body.base_url };
    if (body.api_key) req.api_key = body.api_key;
    testBtn.disabled = true;
    replace(result, h('p', { class: 'muted' }, 'Checking /health and /v1/models…'));
    try {
      const r = await ctx.api.post(`/clusters/${cid}/instances/test-connection`, req);
      served = r.model_ids || [];
      report = r;
      fillModelList();
      applyKind();
      // One served model and nothing typed yet: that is the model.
      if (!f.model.control.value.trim() && served.length === 1) useModel(served[0]);
      replace(result, testReport(r, f.model.control.value.trim(), editing && v.has_api_key && !body.api_key, useModel));
    } catch (e) {
      replace(result); // never leave "Checking…" behind an error
      if (e.notFound && !e.param) replace(result, h('p', { class: 'unavailable' }, `Test connection is not available on this server (POST /api/v1/clusters/{id}/instances/test-connection answered ${e.status}).`));
      else if (e.status === 400) fieldError(e);
      else replace(result, h('p', { class: 'alert alert-error' }, e.message));
    } finally { testBtn.disabled = false; }
  });

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const body = values();
    if (!body) { form.querySelector('[aria-invalid="true"]')?.focus(); return; }
    saveBtn.disabled = true;
    try {
      if (editing) await ctx.api.patch(`/clusters/${cid}/instances/${encodeURIComponent(v.id)}`, body);
      else await ctx.api.post(`/clusters/${cid}/instances`, body);
      toast(editing ? 'Instance saved.' : 'Instance registered. Requests can be routed to it now.');
      onSaved();
    } catch (err) {
      fieldError(err);
    } finally { saveBtn.disabled = false; }
  });
  return form;
}

/**
 * testReport shows a tenants.ConnectionReport: {ok, base_url, health:
 * {ok,status,error}, models: {ok,status,error}, model_ids, latency_ms}.
 * Whether the served model is among model_ids is checked here.
 */
function testReport(r, model, storedKeyNotUsed, useModel) {
  const line = (label, c) => {
    const ok = c && c.ok;
    return h('li', { class: ok ? 'ok' : 'bad' }, h('strong', {}, label), ' — ',
      ok ? `OK (HTTP ${c.status})` : `failed${c && c.status ? ` (HTTP ${c.status})` : ''}: ${(c && c.error) || 'no answer'}`);
  };
  const ids = r.model_ids || [];
  const found = !!model && ids.includes(model);
  const works = r.ok && found;
  const chips = ids.length ? h('div', { class: 'model-chips' }, h('span', { class: 'small' }, 'Served models (click to use): '),
    ids.map((x) => {
      const b = h('button', { type: 'button', class: x === model ? 'chip chip-on' : 'chip', 'aria-pressed': x === model ? 'true' : 'false' }, x);
      b.addEventListener('click', () => {
        useModel(x);
        for (const o of b.parentElement.querySelectorAll('.chip')) { const on = o === b; o.classList.toggle('chip-on', on); o.setAttribute('aria-pressed', on ? 'true' : 'false'); }
      });
      return b;
    })) : null;
  let headline;
  if (works) headline = 'Connection works.';
  else if (r.ok && !model) headline = ids.length ? 'Connection works. Pick the model below.' : 'Connection works, but the server lists no model.';
  else if (r.ok) headline = 'The server answers, but not with this model.';
  else headline = 'Connection test failed.';
  return h('div', { class: works || (r.ok && !model) ? 'alert alert-ok' : 'alert alert-error', role: 'status' },
    h('p', {}, h('strong', {}, headline),
      r.latency_ms !== undefined ? ` ${fmtMs(r.latency_ms)} for both checks.` : ''),
    h('ul', { class: 'checks' },
      line('GET /health', r.health),
      line('GET /v1/models', r.models),
      r.models && r.models.ok && model ? h('li', { class: found ? 'ok' : 'bad' }, h('strong', {}, 'Model'), ' — ',
        found ? `“${model}” is served.` : `“${model}” is not among the served models.`) : null),
    chips,
    storedKeyNotUsed ? h('p', { class: 'small' }, 'Tested without the stored upstream key; type it again to test with it.') : null);
}
