// pages/keys.js: API keys — create (the secret is shown once, with a copy
// button and a warning), list with prefix, last use and per-key preset,
// change a key's preset, edit a key's own rate limits, weights (triangle)
// and SLOs/budget (PATCH /api/v1/keys/{id}), revoke with confirmation.

import { h, replace, field, toast, confirmDialog, copyButton, fmtAgo, fmtDate, fmtInt, fmtUSD } from '../dom.js';
import { list } from '../api.js';
import { loadClusters } from '../data.js';
import { trianglePicker, display } from '../triangle.js';
import { PRESET_WEIGHTS } from '../presets.js';

const KEY_PRESETS = ['', 'quality', 'latency', 'cost', 'balanced'];

export function render(ctx) {
  const secretSlot = h('div', { hidden: true });
  const editSlot = h('div', { hidden: true });
  const listSlot = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  let clusters = [];

  const name = field('Key name', h('input', { name: 'key-name', required: true, maxlength: 100, placeholder: 'e.g. production backend' }));
  const clusterSel = h('select', { name: 'cluster_id' }, h('option', { value: '' }, 'Tenant default cluster'));
  const fCluster = field('Cluster', clusterSel, { hint: 'Requests with this key route on this cluster.' });
  const btn = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Create key');
  const formErr = h('p', { class: 'form-error', role: 'alert' });
  const form = h('form', { class: 'form-row', novalidate: true }, name.el, fCluster.el, h('div', { class: 'actions' }, btn), formErr);

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    name.clear(); fCluster.clear(); formErr.textContent = '';
    const v = name.control.value.trim();
    if (!v) { name.setError('Give the key a name so you can tell keys apart.'); name.control.focus(); return; }
    const body = { name: v };
    if (clusterSel.value) body.cluster_id = clusterSel.value;
    btn.disabled = true;
    try {
      const k = await ctx.api.post('/keys', body);
      name.control.value = '';
      showSecret(k);
      refresh();
    } catch (err) {
      if (err.param === 'cluster_id') fCluster.setError(err.fieldMessage);
      else if (err.param === 'name' || err.status === 409) name.setError(err.fieldMessage);
      else formErr.textContent = err.message;
    } finally { btn.disabled = false; }
  });

  function showSecret(k) {
    const input = h('input', { class: 'mono secret', readonly: true, value: k.key, 'aria-label': 'New API key secret', id: 'new-key-secret' });
    input.addEventListener('focus', () => input.select());
    const done = h('button', { type: 'button', class: 'btn' }, 'I have stored it');
    // Emptied and hidden, so no blank band is left where the banner was.
    done.addEventListener('click', () => { replace(secretSlot); secretSlot.hidden = true; name.control.focus(); });
    secretSlot.hidden = false;
    replace(secretSlot, h('div', { class: 'alert alert-warn secret-box', role: 'alert' },
      h('h2', {}, `Key “${k.name}” created`),
      h('p', {}, h('strong', {}, 'Copy this secret now. It is shown only this once'), ' — RouteBalance stores only a hash and cannot show it again. If you lose it, revoke the key and create a new one.'),
      h('div', { class: 'secret-row' }, input, copyButton(() => k.key, 'Copy key')),
      h('div', { class: 'actions' }, done)));
    input.focus();
  }

  async function refresh() {
    let keys;
    try {
      keys = list(await ctx.api.get('/keys'), 'keys');
    } catch (e) {
      replace(listSlot, h('p', { class: 'alert alert-error' }, `Could not load keys: ${e.message}`));
      return;
    }
    if (ctx.signal.aborted) return;
    const active = keys.filter((k) => !k.revoked_at);
    if (!active.length) {
      replace(listSlot, h('p', { class: 'empty' }, 'No API keys yet. Create one above; requests authenticate with it as a bearer token.'));
      return;
    }
    const cname = new Map(clusters.map((c) => [c.id, c.name]));
    replace(listSlot, h('div', { class: 'table-wrap' }, h('table', { class: 'table cards', id: 'keys-table' },
      h('caption', { class: 'sr-only' }, 'API keys'),
      h('thead', {}, h('tr', {}, ['Name', 'Prefix', 'Cluster', 'Created', 'Last used', 'Preset', 'Limits', ''].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, active.map((k) => keyRow(k, cname))))));
  }

  function keyRow(k, cname) {
    const presetSel = h('select', { 'aria-label': `Preset for key ${k.name}` },
      KEY_PRESETS.map((p) => h('option', { value: p, selected: (k.preset || '') === p }, p || 'tenant default')),
      k.preset === 'custom' ? h('option', { value: 'custom', selected: true }, `custom (${k.weights ? `q ${k.weights.quality}, l ${k.weights.latency}, c ${k.weights.cost}` : '?'})`) : null);
    presetSel.addEventListener('change', async () => {
      presetSel.disabled = true;
      try {
        await ctx.api.patch(`/keys/${encodeURIComponent(k.id)}`, { preset: presetSel.value });
        k.preset = presetSel.value;
        toast(`Key “${k.name}” now uses ${presetSel.value || 'the tenant default'}.`);
      } catch (e) {
        presetSel.value = k.preset || '';
        toast(e.notFound ? 'Per-key presets are not available on this server.' : `Could not change the preset: ${e.message}`, 'error');
      } finally { presetSel.disabled = false; }
    });
    const revoke = h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost' }, 'Revoke');
    revoke.setAttribute('aria-label', `Revoke key ${k.name}`);
    revoke.addEventListener('click', async () => {
      const ok = await confirmDialog(`Revoke key “${k.name}”?`, `Requests using ${k.prefix}… fail with 401 from now on. This cannot be undone.`, 'Revoke key');
      if (!ok) return;
      try {
        await ctx.api.del(`/keys/${encodeURIComponent(k.id)}`);
        toast(`Key “${k.name}” revoked.`);
        refresh();
      } catch (e) { toast(`Could not revoke: ${e.message}`, 'error'); }
    });
    const edit = h('button', { type: 'button', class: 'btn btn-small' }, 'Edit');
    edit.setAttribute('aria-label', `Edit key ${k.name}`);
    edit.addEventListener('click', () => openEdit(k));
    return h('tr', { dataset: { key: k.id } },
      h('td', { 'data-label': 'Name' }, k.name),
      h('td', { class: 'mono', 'data-label': 'Prefix' }, `${k.prefix}…`),
      h('td', { 'data-label': 'Cluster' }, k.cluster_id ? (cname.get(k.cluster_id) || k.cluster_id) : 'default'),
      h('td', { 'data-label': 'Created' }, fmtDate(k.created_at)),
      h('td', { title: k.last_used_at || '', 'data-label': 'Last used' }, fmtAgo(k.last_used_at)),
      h('td', { 'data-label': 'Preset' }, presetSel),
      h('td', { 'data-label': 'Limits', class: 'small' }, limitsText(k)),
      h('td', { class: 'row-actions' }, edit, revoke));
  }

  function openEdit(k) {
    replace(editSlot, keyEditor(ctx, k, clusters, () => { replace(editSlot); editSlot.hidden = true; refresh(); }, () => { replace(editSlot); editSlot.hidden = true; }));
    editSlot.hidden = false;
    editSlot.scrollIntoView({ block: 'start' });
    editSlot.querySelector('input')?.focus({ preventScroll: true });
  }

  (async () => {
    try {
      ({ clusters } = await loadClusters(ctx.api));
      for (const c of clusters) clusterSel.append(h('option', { value: c.id }, c.name || c.id));
    } catch { clusters = []; }
    refresh();
  })();

  return h('section', { class: 'page' },
    h('div', { class: 'page-head' }, h('h1', {}, 'API keys')),
    secretSlot,
    editSlot,
    h('div', { class: 'panel' }, h('h2', {}, 'Create a key'), form),
    h('div', { class: 'panel' }, h('h2', {}, 'Your keys'), listSlot));
}

function limitsText(k) {
  const l = k.limits || {};
  const parts = [];
  if (l.rpm) parts.push(`${fmtInt(l.rpm)} rpm`);
  if (l.tpm) parts.push(`${fmtInt(l.tpm)} tpm`);
  if (l.max_concurrency) parts.push(`${fmtInt(l.max_concurrency)} at once`);
  const slo = k.slo || {};
  if (slo.monthly_budget_usd) parts.push(`${fmtUSD(slo.monthly_budget_usd)}/month`);
  return parts.length ? parts.join(' · ') : 'tenant’s limits';
}

/**
 * keyEditor edits one key's overrides: name, cluster, preset or custom
 * weights (the triangle), SLOs and monthly budget, and rate limits. It
 * sends only what changed in one PATCH /api/v1/keys/{id}.
 */
function keyEditor(ctx, k, clusters, onSaved, onCancel) {
  const slo = k.slo || {};
  const lim = k.limits || {};
  const num = (name, val, attrs = {}) => h('input', { name, type: 'number', min: 0, inputmode: 'decimal', value: val ? val : '', placeholder: 'none', ...attrs });
  const fName = field('Name', h('input', { name: 'name', required: true, maxlength: 100, value: k.name }));
  const clusterSel = h('select', { name: 'cluster_id' }, h('option', { value: '' }, 'Tenant default cluster'),
    clusters.map((c) => h('option', { value: c.id, selected: c.id === k.cluster_id }, c.name || c.id)));
  const fCluster = field('Cluster', clusterSel);
  const presetSel = h('select', { name: 'preset' },
    [['', 'Tenant default'], ['quality', 'Quality'], ['latency', 'Latency'], ['cost', 'Cost'], ['balanced', 'Balanced'], ['custom', 'Custom weights']]
      .map(([v, l]) => h('option', { value: v, selected: (k.preset || '') === v }, l)));
  const fPreset = field('Preset', presetSel, { hint: 'Overrides the tenant’s routing preset for requests with this key.' });
  const start = k.weights && k.preset === 'custom' ? k.weights : PRESET_WEIGHTS[k.preset] || PRESET_WEIGHTS.balanced;
  const picker = trianglePicker({ value: start, markers: [] });
  const triWrap = h('div', { class: 'key-tri', hidden: presetSel.value !== 'custom' }, picker.el);
  presetSel.addEventListener('change', () => {
    triWrap.hidden = presetSel.value !== 'custom';
    if (PRESET_WEIGHTS[presetSel.value]) picker.set(PRESET_WEIGHTS[presetSel.value]);
  });
  const sloDefs = [
    ['ttft_ms', 'TTFT SLO (ms)', 1], ['tpot_ms', 'TPOT SLO (ms)', 0.1], ['e2e_ms', 'E2E SLO (ms)', 1],
    ['max_cost_usd_per_request', 'Max cost per request ($)', 'any'], ['monthly_budget_usd', 'Monthly budget ($)', 'any'],
  ];
  const sloF = Object.fromEntries(sloDefs.map(([key, label, step]) => [key, field(label, num(key, slo[key], { step }))]));
  const limDefs = [['rpm', 'Requests per minute'], ['tpm', 'Tokens per minute'], ['max_concurrency', 'Requests at once']];
  const limF = Object.fromEntries(limDefs.map(([key, label]) => [key, field(label, num(key, lim[key], { step: 1 }))]));
  const save = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Save key');
  const cancel = h('button', { type: 'button', class: 'btn btn-ghost' }, 'Cancel');
  cancel.addEventListener('click', onCancel);
  const err = h('p', { class: 'form-error', role: 'alert' });
  const form = h('form', { class: 'key-editor', novalidate: true, id: 'key-editor' },
    h('div', { class: 'form-grid' }, fName.el, fCluster.el, fPreset.el),
    triWrap,
    h('h3', {}, 'SLOs and budget'), h('p', { class: 'muted small' }, 'Empty = this key has no own budget (the tenant’s apply).'),
    h('div', { class: 'form-grid' }, Object.values(sloF).map((f) => f.el)),
    h('h3', {}, 'Rate limits'), h('p', { class: 'muted small' }, 'Enforced besides the tenant’s limits; empty = unlimited for this key.'),
    h('div', { class: 'form-grid' }, Object.values(limF).map((f) => f.el)),
    err, h('div', { class: 'actions' }, save, cancel));

  const readNums = (fields, int) => {
    const out = {};
    let bad = false;
    for (const [key, f] of Object.entries(fields)) {
      f.clear();
      const raw = f.control.value.trim();
      if (raw === '') { out[key] = 0; continue; }
      const n = Number(raw);
      if (!Number.isFinite(n) || n < 0 || (int && !Number.isInteger(n))) { f.setError(int ? 'Enter a whole number ≥ 0, or leave empty.' : 'Enter a number ≥ 0, or leave empty.'); bad = true; continue; }
      out[key] = n;
    }
    return bad ? null : out;
  };
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    err.textContent = '';
    fName.clear();
    const name = fName.control.value.trim();
    if (!name) { fName.setError('Enter a name.'); fName.control.focus(); return; }
    const sloV = readNums(sloF, false);
    const limV = readNums(limF, true);
    if (!sloV || !limV) { form.querySelector('[aria-invalid="true"]')?.focus(); return; }
    const patch = {};
    if (name !== k.name) patch.name = name;
    if (clusterSel.value !== (k.cluster_id || '')) patch.cluster_id = clusterSel.value;
    const preset = presetSel.value;
    if (preset === 'custom') {
      const w = picker.value;
      if (k.preset !== 'custom' || !k.weights || display(k.weights).quality !== display(w).quality || display(k.weights).cost !== display(w).cost) {
        patch.preset = 'custom'; patch.weights = w;
      }
    } else if (preset !== (k.preset || '')) patch.preset = preset;
    if (sloDefs.some(([key]) => (Number(slo[key]) || 0) !== sloV[key])) patch.slo = sloV;
    if (limDefs.some(([key]) => (Number(lim[key]) || 0) !== limV[key])) patch.limits = limV;
    if (!Object.keys(patch).length) { toast('Nothing changed.'); onCancel(); return; }
    save.disabled = true;
    try {
      await ctx.api.patch(`/keys/${encodeURIComponent(k.id)}`, patch);
      toast(`Key “${name}” saved.`);
      onSaved();
    } catch (ex) {
      const p = ex.param || '';
      const target = p === 'name' ? fName : p === 'cluster_id' ? fCluster : p === 'preset' || p.startsWith('weights') ? fPreset
        : sloF[p.replace(/^slo\./, '')] || limF[p.replace(/^limits\./, '')];
      if (target) target.setError(ex.fieldMessage); else err.textContent = ex.message;
    } finally { save.disabled = false; }
  });
  return h('div', { class: 'panel' }, h('div', { class: 'panel-head' }, h('h2', {}, `Edit key “${k.name}”`),
    h('span', { class: 'muted small mono' }, `${k.prefix}…`)), form);
}
