// pages/routing.js: how requests trade quality against latency and cost —
// the tenant's preset or custom weights (triangle picker), a what-if preview
// of those weights on recent traffic, the cluster's policy, the SLOs and the
// monthly budget. Saved with PATCH /api/v1/settings (only the changed fields) and
// PATCH /api/v1/clusters/{id}; the next request uses them.

import { h, replace, field, toast, fmtNum, fmtMs, fmtUSD, fmtInt, fmtQ } from '../dom.js';
import { trianglePicker, display } from '../triangle.js';
import { loadClusters } from '../data.js';

/** PRESETS mirror routing.PresetWeights on the server. */
export const PRESETS = [
  { name: 'quality', title: 'Quality', w: { quality: 0.8, latency: 0.1, cost: 0.1 }, blurb: 'The best predicted answer, even on a busier or pricier instance.' },
  { name: 'latency', title: 'Latency', w: { quality: 0.1, latency: 0.8, cost: 0.1 }, blurb: 'Whichever instance answers soonest right now.' },
  { name: 'cost', title: 'Cost', w: { quality: 0.1, latency: 0.1, cost: 0.8 }, blurb: 'The cheapest instance that is good enough.' },
  { name: 'balanced', title: 'Balanced', w: { quality: 1 / 3, latency: 1 / 3, cost: 1 / 3 }, blurb: 'Equal weight on all three.' },
];

const POLICIES = [
  { name: 'routebalance', label: 'RouteBalance (fused quality × load × cost)' },
  { name: 'shortest-queue', label: 'Baseline: shortest queue (load only)' },
  { name: 'round-robin', label: 'Baseline: round robin' },
  { name: 'quality-only', label: 'Baseline: quality only, then least loaded' },
  { name: 'threshold', label: 'Baseline: threshold (cheapest model above quality t)' },
  { name: 'chimera', label: 'Baseline: Chimera (best quality within delay slack τ)' },
];

const same = (a, b) => Math.abs(a.quality - b.quality) < 1e-6 && Math.abs(a.latency - b.latency) < 1e-6 && Math.abs(a.cost - b.cost) < 1e-6;

export function render(ctx) {
  const root = h('div', { class: 'stack' }, h('p', { class: 'muted' }, 'Loading…'));
  const page = h('section', { class: 'page' }, h('div', { class: 'page-head' }, h('h1', {}, 'Routing')), root);
  load();
  return page;

  async function load() {
    let data;
    try { data = await loadClusters(ctx.api); } catch (e) {
      replace(root, h('p', { class: 'alert alert-error', role: 'alert' }, `Could not load settings: ${e.message}`));
      return;
    }
    if (ctx.signal.aborted) return;
    const saved = normaliseSettings(data.settings);
    replace(root, presetPanel(saved, data.cluster), policyPanel(data.cluster), sloPanel(saved));
  }

  function normaliseSettings(st) {
    const x = st || {};
    let w = x.weights && (x.weights.quality + x.weights.latency + x.weights.cost > 0.99) ? { ...x.weights } : null;
    const preset = x.preset || 'balanced';
    const p = PRESETS.find((pp) => pp.name === preset);
    if (p && !w) w = { ...p.w };
    if (!w) w = { ...PRESETS[3].w };
    return { default_cluster_id: x.default_cluster_id || '', preset, weights: w, slo: { ...(x.slo || {}) }, raw: x };
  }

  // patchSettings sends only what changed (PATCH /api/v1/settings: absent
  // fields keep their saved values), so saving the SLOs never resets the
  // preset and saving the preset never resets an SLO.
  async function patchSettings(saved, patch) {
    const resp = await ctx.api.patch('/settings', patch);
    Object.assign(saved, normaliseSettings(resp && typeof resp === 'object' && resp.preset ? resp : { ...saved.raw, ...patch, slo: { ...saved.slo, ...(patch.slo || {}) } }));
    return saved;
  }

  // ---- preset + triangle + what-if -------------------------------------
  function presetPanel(saved, cluster) {
    let preset = saved.preset;
    const groupName = 'preset';
    const cards = h('div', { class: 'preset-cards', role: 'radiogroup', 'aria-label': 'Routing preset' });
    const radios = new Map();
    for (const p of [...PRESETS, { name: 'custom', title: 'Custom', blurb: 'Your own weights from the triangle.' }]) {
      const r = h('input', { type: 'radio', name: groupName, value: p.name, id: `preset-${p.name}`, checked: p.name === preset });
      radios.set(p.name, r);
      const d = p.w ? display(p.w) : null;
      cards.append(h('label', { class: 'preset-card', for: r.id, dataset: { preset: p.name } }, r,
        h('span', { class: 'preset-title' }, p.title),
        h('span', { class: 'preset-blurb' }, p.blurb),
        d ? h('span', { class: 'preset-w mono' }, `q ${d.quality} · l ${d.latency} · c ${d.cost}`) : null));
      r.addEventListener('change', () => {
        if (!r.checked) return;
        preset = p.name;
        if (p.w) { picker.set(p.w); preview(p.w); }
        dirty();
      });
    }
    const picker = trianglePicker({
      value: saved.weights,
      markers: PRESETS.map((p) => ({ label: p.title[0], w: p.w })),
      onInput: (w) => { choose(w); preview(w); },
      onChange: (w) => { choose(w); preview(w, true); },
    });
    function choose(w) {
      const p = PRESETS.find((pp) => same(pp.w, w));
      preset = p ? p.name : 'custom';
      radios.get(preset).checked = true;
      dirty();
    }
    const saveBtn = h('button', { type: 'button', class: 'btn btn-primary', disabled: true }, 'Save preset');
    const revertBtn = h('button', { type: 'button', class: 'btn btn-ghost', disabled: true }, 'Revert');
    const saveMsg = h('p', { class: 'form-error', role: 'alert' });
    function dirty() {
      const changed = preset !== saved.preset || !same(picker.value, saved.weights);
      saveBtn.disabled = !changed; revertBtn.disabled = !changed;
    }
    revertBtn.addEventListener('click', () => {
      preset = saved.preset;
      radios.get(preset) && (radios.get(preset).checked = true);
      picker.set(saved.weights); preview(saved.weights, true); dirty();
    });
    saveBtn.addEventListener('click', async () => {
      saveMsg.textContent = '';
      saveBtn.disabled = true;
      const w = picker.value;
      try {
        await patchSettings(saved, preset === 'custom' ? { preset, weights: w } : { preset });
        toast(`Saved: ${preset} (${fmtWeights(w)}). The next request uses it.`);
      } catch (e) {
        saveMsg.textContent = e.message;
      }
      dirty();
    });

    // What-if preview: POST /api/v1/clusters/{id}/whatif (see web/README.md).
    const wi = h('div', { class: 'whatif', 'aria-live': 'polite' });
    let unavailable = false; let timer = 0; let inflight = false; let queued = null; let base = null;
    function preview(w, now) {
      if (unavailable || !cluster) return;
      clearTimeout(timer);
      timer = setTimeout(() => run(w), now ? 0 : 250);
    }
    async function run(w) {
      if (inflight) { queued = w; return; }
      inflight = true;
      wi.classList.add('busy');
      try {
        const r = await ctx.api.post(`/clusters/${encodeURIComponent(cluster.id)}/whatif`, {
          weights: w, baseline_weights: saved.weights, max_requests: 500,
        });
        if (!ctx.signal.aborted) replace(wi, whatifView(r, w));
        base = r.baseline || base;
      } catch (e) {
        if (e.status === 404 || e.status === 405 || e.status === 501) {
          unavailable = true;
          replace(wi, h('div', { class: 'unavailable' }, h('h3', {}, 'What-if preview: not available on this server'),
            h('p', {}, 'This server does not offer ', h('code', {}, 'POST /api/v1/clusters/{id}/whatif'),
              ' (replaying recent traffic through the simulator), so no prediction is shown. Saving works as usual.')));
        } else if (!ctx.signal.aborted) {
          replace(wi, h('p', { class: 'alert alert-error' }, `Preview failed: ${e.message}`));
        }
      } finally {
        inflight = false;
        wi.classList.remove('busy');
        if (queued) { const q = queued; queued = null; run(q); }
      }
    }
    if (cluster) preview(saved.weights, true);
    else replace(wi, h('p', { class: 'muted' }, 'Create a cluster to preview weights against it.'));

    return h('div', { class: 'panel' },
      h('div', { class: 'panel-head' }, h('h2', {}, 'Routing preset'),
        h('span', { class: 'muted small' }, 'Tenant default; API keys and single requests can override it.')),
      cards,
      h('div', { class: 'tri-row' }, picker.el, h('div', { class: 'whatif-col' }, h('h3', {}, 'What-if preview'), wi)),
      saveMsg,
      h('div', { class: 'actions' }, saveBtn, revertBtn));
  }

  // The live state the replay started from (POST …/whatif → live).
  function liveText(l) {
    if (!l) return 'starting idle (the router has not routed this cluster yet)';
    return `starting from the live state: ${fmtInt(l.in_flight)} request${l.in_flight === 1 ? '' : 's'} in flight and ${fmtInt(l.waiting)} queued on ${fmtInt(l.instances)} instance${l.instances === 1 ? '' : 's'}`;
  }

  function whatifView(r, w) {
    const p = r.predicted || r;
    const b = r.baseline || null;
    const delta = (k, fmt, better) => {
      if (!b || b[k] === undefined || p[k] === undefined) return null;
      const d = p[k] - b[k];
      if (Math.abs(d) < 1e-12) return h('span', { class: 'delta' }, 'same as saved');
      const good = better === 'up' ? d > 0 : d < 0;
      return h('span', { class: good ? 'delta good' : 'delta bad' }, `${d > 0 ? '+' : '−'}${fmt(Math.abs(d))} vs saved`);
    };
    const obs = r.observed || null;
    const src = r.source === 'observed' && obs
      ? `this cluster’s last ${fmtInt(obs.requests)} requests (${fmtWindow(obs.window_from, obs.window_to)}) as recorded, at their observed ${fmtNum(obs.rate_rps, 2)} req/s`
      : r.source === 'recent'
        ? `${fmtInt(r.requests)} recent requests of this tenant at ${fmtNum(r.rate_rps, 2)} req/s (half the cluster’s estimated capacity)`
        : `a sample workload of ${fmtInt(r.requests)} requests at ${fmtNum(r.rate_rps, 2)} req/s (no recent traffic: half the cluster’s estimated capacity)`;
    const stat = (label, v, fmt, k, better, observed) => h('div', { class: 'stat' },
      h('div', { class: 'stat-label' }, label), h('div', { class: 'stat-value' }, fmt(v)), delta(k, fmt, better),
      observed !== undefined && observed !== null ? h('div', { class: 'stat-sub observed' }, `observed ${fmt(observed)}`) : null);
    return h('div', { id: 'whatif-result', dataset: { source: r.source || '' } },
      h('p', { class: 'muted small' }, `For ${fmtWeights(w)}: replaying ${src} through the simulator on engines derived from the router’s live latency models, ${liveText(r.live)}.`),
      h('div', { class: 'stats stats-small' },
        stat('Mean quality', p.mean_quality, fmtQ, 'mean_quality', 'up', obs ? obs.mean_predicted_quality : undefined),
        stat('Mean E2E latency', p.mean_e2e_ms, fmtMs, 'mean_e2e_ms', 'down', obs ? obs.mean_e2e_ms : undefined),
        stat('p95 E2E latency', p.p95_e2e_ms, fmtMs, 'p95_e2e_ms', 'down', obs ? obs.p95_e2e_ms : undefined),
        stat('Mean cost / request', p.mean_cost_usd, fmtUSD, 'mean_cost_usd', 'down', obs ? obs.mean_cost_usd : undefined)),
      obs ? h('p', { class: 'muted small' }, 'Observed: what those requests got (quality is what the router predicted when it routed them). With the weights they were routed with, the prediction should match it.') : null);
  }

  // ---- policy ------------------------------------------------------------
  function policyPanel(cluster) {
    if (!cluster) {
      return h('div', { class: 'panel' }, h('h2', {}, 'Policy'), h('p', { class: 'muted' }, 'Create a cluster on the ',
        h('a', { href: '/cluster', 'data-link': true }, 'Cluster'), ' page first.'));
    }
    const pol = cluster.policy || {};
    const known = POLICIES.some((p) => p.name === pol.name);
    const sel = h('select', { name: 'policy' },
      POLICIES.map((p) => h('option', { value: p.name, selected: p.name === (pol.name || 'routebalance') }, p.label)),
      !known && pol.name ? h('option', { value: pol.name, selected: true }, pol.name) : null);
    const fPol = field('Policy for this cluster', sel, { wide: true });
    const fT = field('Quality threshold t (0–1)', h('input', { name: 'threshold', type: 'number', min: 0, max: 1, step: 0.01, value: pol.threshold ?? '' }));
    const fS = field('Delay slack τ (fraction of fastest)', h('input', { name: 'slack', type: 'number', min: 0, step: 0.05, value: pol.slack ?? '' }));
    const fG = field('Switch gain Δs (quality)', h('input', { name: 'switch_gain', type: 'number', min: 0, max: 1, step: 0.01, value: pol.switch_gain ?? '' }));
    const show = () => { fT.el.hidden = sel.value !== 'threshold'; fS.el.hidden = sel.value !== 'chimera'; fG.el.hidden = sel.value !== 'chimera'; };
    sel.addEventListener('change', show); show();
    const btn = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Save policy');
    const err = h('p', { class: 'form-error', role: 'alert' });
    const form = h('form', { novalidate: true }, h('div', { class: 'form-grid' }, fPol.el, fT.el, fS.el, fG.el), err, h('div', { class: 'actions' }, btn));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      for (const f of [fPol, fT, fS, fG]) f.clear();
      err.textContent = '';
      const body = { name: sel.value };
      const num = (f, key, max) => {
        const raw = f.control.value.trim();
        if (raw === '') { f.setError('Required for this policy.'); return false; }
        const n = Number(raw);
        if (!Number.isFinite(n) || n < 0 || (max !== undefined && n > max)) { f.setError(`Enter a number from 0${max !== undefined ? ` to ${max}` : ''}.`); return false; }
        body[key] = n; return true;
      };
      let ok = true;
      if (body.name === 'threshold') ok = num(fT, 'threshold', 1);
      if (body.name === 'chimera') ok = num(fS, 'slack') & num(fG, 'switch_gain', 1);
      if (!ok) { form.querySelector('[aria-invalid="true"]')?.focus(); return; }
      btn.disabled = true;
      try {
        await ctx.api.patch(`/clusters/${encodeURIComponent(cluster.id)}`, { policy: body });
        cluster.policy = body;
        toast(`Policy set to ${body.name}. The next request uses it.`);
      } catch (ex) {
        const target = { 'policy.threshold': fT, 'policy.slack': fS, 'policy.switch_gain': fG, policy: fPol, 'policy.name': fPol }[ex.param];
        if (target) target.setError(ex.fieldMessage); else err.textContent = ex.message;
      } finally { btn.disabled = false; }
    });
    return h('div', { class: 'panel' }, h('div', { class: 'panel-head' }, h('h2', {}, 'Policy'),
      h('span', { class: 'muted small' }, `Cluster “${cluster.name}”. Baselines route on the same path, for comparison.`)), form);
  }

  // ---- SLOs and budget ---------------------------------------------------
  function sloPanel(saved) {
    const defs = [
      ['ttft_ms', 'Time to first token SLO (ms)', 1],
      ['tpot_ms', 'Time per output token SLO (ms)', 0.1],
      ['e2e_ms', 'End-to-end latency SLO (ms)', 1],
      ['max_cost_usd_per_request', 'Max cost per request ($)', 'any'],
      ['monthly_budget_usd', 'Monthly budget ($)', 'any'],
    ];
    const fields = Object.fromEntries(defs.map(([k, label, step]) => [k, field(label,
      h('input', { name: k, type: 'number', min: 0, step, inputmode: 'decimal', value: saved.slo[k] ? saved.slo[k] : '', placeholder: 'none' }),
      k === 'monthly_budget_usd' ? { hint: 'Inference answers 402 once this month’s spend reaches it.' } : undefined)]));
    const btn = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Save SLOs and budget');
    const err = h('p', { class: 'form-error', role: 'alert' });
    const form = h('form', { novalidate: true }, h('p', { class: 'muted small' }, 'Leave a field empty for no limit. Candidates predicted to miss an SLO are filtered out (relaxed in the order TTFT, TPOT, quality, budget when none is left).'),
      h('div', { class: 'form-grid' }, Object.values(fields).map((f) => f.el)), err, h('div', { class: 'actions' }, btn));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      err.textContent = '';
      const slo = {};
      let bad = false;
      for (const [k, f] of Object.entries(fields)) {
        f.clear();
        const raw = f.control.value.trim();
        if (raw === '') { slo[k] = 0; continue; }
        const n = Number(raw);
        if (!Number.isFinite(n) || n < 0) { f.setError('Enter a number ≥ 0, or leave empty for none.'); bad = true; continue; }
        slo[k] = n;
      }
      if (bad) { form.querySelector('[aria-invalid="true"]')?.focus(); return; }
      btn.disabled = true;
      try {
        await patchSettings(saved, { slo: changedSLO(saved.slo, slo) });
        toast('SLOs and budget saved.');
      } catch (ex) {
        const target = fields[(ex.param || '').replace(/^slo\./, '')];
        if (target) target.setError(ex.fieldMessage); else err.textContent = ex.message;
      } finally { btn.disabled = false; }
    });
    return h('div', { class: 'panel' }, h('h2', {}, 'SLOs and monthly budget'), form);
  }
}

/** fmtWindow formats the replayed window: "10:02–10:14" or "Nov 30 10:02 – Dec 1 09:14". */
function fmtWindow(from, to) {
  const a = new Date(from); const b = new Date(to);
  if (Number.isNaN(a.getTime()) || Number.isNaN(b.getTime())) return 'recent';
  const t = (d) => d.toLocaleTimeString('en-US', { hour: '2-digit', minute: '2-digit', hour12: false });
  const d = (x) => x.toLocaleDateString('en-US', { month: 'short', day: 'numeric' });
  return a.toDateString() === b.toDateString() ? `${d(a)} ${t(a)}–${t(b)}` : `${d(a)} ${t(a)} – ${d(b)} ${t(b)}`;
}

/** changedSLO keeps only the SLO fields that differ from the saved ones. */
function changedSLO(saved, next) {
  const out = {};
  for (const [k, v] of Object.entries(next)) if ((Number(saved[k]) || 0) !== v) out[k] = v;
  return out;
}

function fmtWeights(w) {
  const d = display(w);
  return `quality ${d.quality}, latency ${d.latency}, cost ${d.cost}`;
}
