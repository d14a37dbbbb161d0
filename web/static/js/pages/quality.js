// pages/quality.js: the current cluster's quality data — upload labelled
// prompts (JSON lines, with upload progress and every rejected line), the
// index's status and per-model counts, where each model's Q̂ comes from
// (GET /state), the LLM judge's settings and spend, and a chart of the mean
// Q̂ per model over time (GET …/quality-data "history").

import { h, replace, field, toast, confirmDialog, fmtInt, fmtQ, fmtUSD, fmtAgo } from '../dom.js';
import { list } from '../api.js';
import { clusterPage } from '../data.js';
import { timeChart } from '../chart.js';

const POLL_MS = 4000;

export function render(ctx) {
  const { page } = clusterPage(ctx, 'Quality data', (data) => (data.cluster
    ? view(data.cluster)
    : h('p', { class: 'empty' }, 'Create a cluster first (Cluster page).')));
  return page;

  function view(cluster) {
    const cid = encodeURIComponent(cluster.id);
    const statusSlot = h('div', { id: 'quality-status' }, h('p', { class: 'muted' }, 'Loading…'));
    const modelsSlot = h('div', { id: 'quality-models' });
    const chartSlot = h('div', { id: 'quality-chart' });
    const judgeSlot = h('div', { id: 'quality-judge' }, h('p', { class: 'muted' }, 'Loading…'));
    let models = [];
    let judgeDrawn = false;
    let gen = 0; // a save bumps it so a refresh already under way does not draw older data

    // ---- upload ------------------------------------------------------------
    const file = h('input', { type: 'file', name: 'quality-file', accept: '.jsonl,.json,.txt,application/x-ndjson,application/json' });
    const fileField = field('Labelled prompts (JSON lines)', file, {
      hint: 'One {"id","prompt","scores":{"<served model>":0..1},"output_tokens"?,"task"?} per line — the format of routebalance index build. Scores of models this cluster does not serve are ignored.',
      wide: true,
    });
    const bar = h('progress', { id: 'upload-progress', max: 100, value: 0, hidden: true, 'aria-label': 'Upload progress' });
    const result = h('div', { id: 'upload-result', 'aria-live': 'polite' });
    const upBtn = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Upload');
    const delBtn = h('button', { type: 'button', class: 'btn btn-danger-ghost' }, 'Delete quality data');
    const form = h('form', { class: 'form-row', novalidate: true, id: 'upload-form' }, fileField.el, h('div', { class: 'actions' }, upBtn, delBtn), bar);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      fileField.clear();
      replace(result);
      const f = file.files && file.files[0];
      if (!f) { fileField.setError('Choose a file.'); file.focus(); return; }
      upBtn.disabled = true;
      bar.hidden = false; bar.value = 0;
      try {
        const out = await upload(`/api/v1/clusters/${cid}/quality-data`, f, (p) => { bar.value = Math.round(p * 100); });
        replace(result, h('p', { class: 'alert alert-ok' },
          `Accepted ${fmtInt(out.records)} of ${fmtInt(out.lines)} lines; building the index…`,
          Object.keys(out.unknown_models || {}).length ? ` Ignored models this cluster does not serve: ${Object.entries(out.unknown_models).map(([m, n]) => `${m} (${fmtInt(n)} lines)`).join(', ')}.` : ''));
        refresh();
      } catch (err) {
        const lines = (err.body && err.body.errors) || [];
        replace(result, h('div', { class: 'alert alert-error', role: 'alert' },
          h('p', {}, err.message),
          lines.length ? h('ul', { id: 'upload-errors' }, lines.slice(0, 20).map((l) => h('li', {}, `Line ${l.line}: ${l.message}`))) : null));
      } finally {
        upBtn.disabled = false;
        bar.hidden = true;
      }
    });
    delBtn.addEventListener('click', async () => {
      if (!(await confirmDialog('Delete this cluster’s quality data?', 'Its models go back to the operator-wide index, then to their priors. Labels learned from feedback and the judge are dropped too.', 'Delete'))) return;
      try {
        await ctx.api.del(`/clusters/${cid}/quality-data`);
        toast('Quality data deleted.');
        refresh();
      } catch (e) { toast(e.status === 404 ? 'There is no quality data to delete.' : `Could not delete: ${e.message}`, 'error'); }
    });

    /** upload POSTs the file with XMLHttpRequest (fetch reports no upload progress). */
    async function upload(url, f, progress) {
      await ctx.session.ensureFresh();
      return new Promise((resolve, reject) => {
        const x = new XMLHttpRequest();
        x.open('POST', url);
        x.setRequestHeader('Authorization', `Bearer ${ctx.session.access}`);
        x.setRequestHeader('Content-Type', 'application/x-ndjson');
        x.upload.onprogress = (ev) => { if (ev.lengthComputable) progress(ev.loaded / ev.total); };
        x.onerror = () => reject(Object.assign(new Error('The server could not be reached.'), { body: null }));
        x.onload = () => {
          let body = null;
          try { body = JSON.parse(x.responseText); } catch { body = null; }
          if (x.status >= 200 && x.status < 300) { progress(1); resolve(body || {}); return; }
          const msg = (body && body.error && body.error.message) || `HTTP ${x.status}`;
          reject(Object.assign(new Error(msg), { body, status: x.status }));
        };
        x.send(f);
      });
    }

    // ---- status, models, chart ---------------------------------------------
    async function refresh() {
      const my = ++gen;
      let qd; let state = null; let judge = null;
      try {
        [qd, state, judge] = await Promise.all([
          ctx.api.get(`/clusters/${cid}/quality-data`),
          ctx.api.get(`/clusters/${cid}/state`).catch(() => null),
          ctx.api.get(`/clusters/${cid}/quality-judge`).catch((e) => { if (e.notFound) return null; throw e; }),
        ]);
        const ins = list(await ctx.api.get(`/clusters/${cid}/instances`), 'instances');
        models = [...new Set(ins.filter((i) => i.kind !== 'embedding').map((i) => i.model))].sort();
      } catch (e) {
        replace(statusSlot, h('p', { class: 'alert alert-error' }, `Could not load quality data: ${e.message}`));
        return;
      }
      if (ctx.signal.aborted || my !== gen) return;
      const d = qd.data || {};
      drawStatus(d, qd.max_bytes);
      drawModels(d, state, judge);
      drawChart(d.history || []);
      if (!judgeDrawn) { drawJudge(judge); judgeDrawn = true; } else drawSpend(judge);
    }

    function stat(label, value, sub) {
      return h('div', { class: 'stat' }, h('div', { class: 'stat-label' }, label), h('div', { class: 'stat-value' }, value), sub ? h('div', { class: 'stat-sub' }, sub) : null);
    }

    function drawStatus(d, maxBytes) {
      const label = { none: 'No data', building: 'Building…', ready: 'Ready', failed: 'Failed' }[d.status] || d.status;
      replace(statusSlot,
        h('div', { class: 'stats' },
          stat('Status', h('span', { id: 'quality-state', class: `badge ${d.status === 'ready' ? 'badge-on' : d.status === 'failed' ? 'badge-bad' : 'badge-off'}` }, label),
            d.estimator ? `estimator: ${d.estimator}` : ''),
          stat('Records', fmtInt(d.records || 0), d.held_out ? `${fmtInt(d.indexed)} indexed, ${fmtInt(d.held_out)} held back` : ''),
          stat('Validation AUC', d.validation_auc === null || d.validation_auc === undefined ? '—' : fmtQ(d.validation_auc), 'on the held-back slice'),
          stat('Built', d.built_at ? fmtAgo(d.built_at) : '—', d.uploaded_at ? `uploaded ${fmtAgo(d.uploaded_at)}` : '')),
        d.error ? h('p', { class: 'alert alert-error' }, d.error) : null,
        h('p', { class: 'muted small' }, `Uploads up to ${fmtInt((maxBytes || 0) / (1 << 20))} MiB replace the cluster’s previous data.`));
    }

    function drawModels(d, state, judge) {
      const src = {};
      for (const s of (Array.isArray(state && state.state) ? state.state : [])) {
        const rank = { cluster: 3, index: 2, prior: 1 };
        if (!src[s.model] || (rank[s.estimate_source] || 0) > (rank[src[s.model]] || 0)) src[s.model] = s.estimate_source;
      }
      const jl = (judge && judge.stats && judge.stats.labels) || {};
      const names = [...new Set([...models, ...Object.keys(d.models || {}), ...Object.keys(d.online_labels || {})])].sort();
      if (!names.length) { replace(modelsSlot, h('p', { class: 'empty' }, 'No models yet: register instances on the Cluster page.')); return; }
      const sourceText = { cluster: 'cluster data', index: 'operator index', prior: 'prior' };
      const live = !!(state && state.live);
      const cols = ['Model', 'Uploaded labels', 'AUC', 'Feedback + judge labels', 'Estimate source'];
      replace(modelsSlot, h('div', { class: 'table-wrap' }, h('table', { class: 'table cards', id: 'quality-models-table' },
        h('caption', { class: 'sr-only' }, 'Quality knowledge per model'),
        h('thead', {}, h('tr', {}, cols.map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, names.map((m) => h('tr', {},
          h('td', { class: 'wrap-any', 'data-label': cols[0] }, m),
          h('td', { class: 'num', 'data-label': cols[1] }, fmtInt((d.models || {})[m] || 0)),
          h('td', { class: 'num', 'data-label': cols[2] }, (d.model_auc || {})[m] === undefined ? '—' : fmtQ(d.model_auc[m])),
          h('td', { class: 'num', 'data-label': cols[3] }, fmtInt(((d.online_labels || {})[m] || 0)), jl[m] ? h('span', { class: 'muted' }, ` (judge ${fmtInt(jl[m])})`) : null),
          h('td', { 'data-label': cols[4] }, src[m] ? sourceText[src[m]] || src[m] : live ? '—' : 'not routed yet')))))));
    }

    function drawChart(history) {
      const byModel = {};
      for (const p of history) {
        const t = Date.parse(p.at);
        for (const [m, v] of Object.entries(p.mean_q || {})) (byModel[m] = byModel[m] || []).push({ t, y: v });
      }
      // One point so far: drawn as a level up to now.
      const now = Date.now();
      for (const pts of Object.values(byModel)) if (pts.length === 1 && now > pts[0].t) pts.push({ t: now, y: pts[0].y });
      replace(chartSlot, timeChart({
        kind: 'line', caption: 'Mean Q̂ per model', label: 'Mean predicted quality per model over time', yFormat: fmtQ, now,
        series: Object.keys(byModel).sort().map((m) => ({ name: m, points: byModel[m] })),
        empty: 'No estimates recorded yet: they appear once the cluster has an index (upload, feedback or the judge).',
      }));
    }

    // ---- judge -------------------------------------------------------------
    const spendSlot = h('div', { id: 'judge-spend' });
    function drawSpend(judge) {
      if (!judge) { replace(spendSlot); return; }
      const st = judge.stats || {}; const set = judge.settings || {};
      replace(spendSlot, h('div', { class: 'stats stats-small' },
        stat('Spent this month', fmtUSD(st.spent_usd || 0), set.monthly_budget_usd ? `of ${fmtUSD(set.monthly_budget_usd)}` : ''),
        stat('Judged', fmtInt(st.judged || 0), `${fmtInt(st.sampled || 0)} sampled, ${fmtInt(st.dropped || 0)} dropped, ${fmtInt(st.failed || 0)} failed`),
        stat('Cost per label', st.cost_per_label_usd ? fmtUSD(st.cost_per_label_usd) : '—')));
    }
    function drawJudge(judge) {
      if (!judge) { replace(judgeSlot, h('p', { class: 'muted' }, 'This server has no quality judge.')); return; }
      const set = judge.settings || {};
      const enabled = h('input', { type: 'checkbox', name: 'judge-enabled', checked: !!set.enabled });
      const model = h('select', { name: 'judge-model' }, models.map((m) => h('option', { value: m, selected: m === set.model }, m)));
      const rate = h('input', { type: 'number', name: 'judge-rate', min: 0, max: 1, step: 0.01, value: set.sample_rate || 0.05 });
      const budget = h('input', { type: 'number', name: 'judge-budget', min: 0, step: 0.01, value: set.monthly_budget_usd || 10 });
      const fm = field('Judge model', model, { hint: 'One of this cluster’s models scores sampled answers.' });
      const fr = field('Sample rate', rate, { hint: 'Fraction of answers judged, 0–1.' });
      const fb = field('Monthly judge budget ($)', budget);
      const save = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Save judge settings');
      const f = h('form', { class: 'form-grid', novalidate: true, id: 'judge-form' },
        h('label', { class: 'check' }, enabled, ' Judge sampled answers with one of my models'), fm.el, fr.el, fb.el, h('div', { class: 'actions' }, save));
      f.addEventListener('submit', async (e) => {
        e.preventDefault();
        for (const x of [fm, fr, fb]) x.clear();
        save.disabled = true;
        try {
          const out = await ctx.api.put(`/clusters/${cid}/quality-judge`, {
            enabled: enabled.checked, model: model.value, sample_rate: Number(rate.value), monthly_budget_usd: Number(budget.value),
          });
          gen++;
          toast(out.settings.enabled ? 'Judge enabled.' : 'Judge settings saved (off).');
          drawSpend(out);
        } catch (err) {
          const target = { model: fm, sample_rate: fr, monthly_budget_usd: fb }[err.param];
          if (target) target.setError(err.fieldMessage); else toast(err.message, 'error');
        } finally { save.disabled = false; }
      });
      replace(judgeSlot, f, spendSlot);
      drawSpend(judge);
    }

    ctx.every(POLL_MS, refresh);
    return h('div', { class: 'stack' },
      h('p', { class: 'muted' }, `Cluster “${cluster.name || cluster.id}”: its own quality labels come first, the operator-wide index fills the models they lack, the instances’ priors the rest.`),
      h('div', { class: 'panel' }, h('h2', {}, 'Upload labelled prompts'), form, result),
      h('div', { class: 'panel' }, h('h2', {}, 'Index'), statusSlot, modelsSlot),
      h('div', { class: 'panel' }, chartSlot),
      h('div', { class: 'panel' }, h('h2', {}, 'LLM judge'), judgeSlot));
  }
}
