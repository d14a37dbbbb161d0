// pages/keys.js: API keys — create (the secret is shown once, with a copy
// button and a warning), list with prefix, last use and per-key preset,
// change a key's preset (PATCH /api/v1/keys/{id}), revoke with confirmation.

import { h, replace, field, toast, confirmDialog, copyButton, fmtAgo, fmtDate } from '../dom.js';
import { list } from '../api.js';
import { loadClusters } from '../data.js';

const KEY_PRESETS = ['', 'quality', 'latency', 'cost', 'balanced'];

export function render(ctx) {
  const secretSlot = h('div', {});
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
    done.addEventListener('click', () => { replace(secretSlot); name.control.focus(); });
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
    replace(listSlot, h('div', { class: 'table-wrap' }, h('table', { class: 'table', id: 'keys-table' },
      h('caption', { class: 'sr-only' }, 'API keys'),
      h('thead', {}, h('tr', {}, ['Name', 'Prefix', 'Cluster', 'Created', 'Last used', 'Preset', ''].map((c) => h('th', { scope: 'col' }, c)))),
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
    return h('tr', {},
      h('td', {}, k.name),
      h('td', { class: 'mono' }, `${k.prefix}…`),
      h('td', {}, k.cluster_id ? (cname.get(k.cluster_id) || k.cluster_id) : 'default'),
      h('td', {}, fmtDate(k.created_at)),
      h('td', { title: k.last_used_at || '' }, fmtAgo(k.last_used_at)),
      h('td', {}, presetSel),
      h('td', { class: 'row-actions' }, revoke));
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
    h('div', { class: 'panel' }, h('h2', {}, 'Create a key'), form),
    h('div', { class: 'panel' }, h('h2', {}, 'Your keys'), listSlot));
}
