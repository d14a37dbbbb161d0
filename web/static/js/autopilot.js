// autopilot.js: the autopilot panel of the cluster page — every controller
// of the cluster (one per target set, GET /api/v1/clusters/{id}/autopilot):
// its targets, the weights it set and the share of windows that met the
// targets, with two charts over time (the three weights; each window's p95
// against the target) and its last decisions.

import { h, fmtNum, fmtPct } from './dom.js';
import { timeChart } from './chart.js';

/** fmtTargets names a controller's targets. */
export function fmtTargets(t) {
  const parts = [];
  if (t.p95_e2e_ms) parts.push(`p95 E2E ≤ ${fmtNum(t.p95_e2e_ms / 1000, 2)} s`);
  if (t.p95_ttft_ms) parts.push(`p95 TTFT ≤ ${fmtNum(t.p95_ttft_ms / 1000, 2)} s`);
  if (t.max_cost_usd_per_request) parts.push(`cost ≤ $${t.max_cost_usd_per_request}`);
  return parts.join(', ') || 'no targets';
}

/** autopilotView draws the answer of GET /clusters/{id}/autopilot. */
export function autopilotView(r) {
  const ctrls = (r && r.controllers) || [];
  if (r && r.running === false) {
    return h('p', { class: 'unavailable', id: 'autopilot-off' }, 'The autopilot is not running on this server.');
  }
  if (!ctrls.length) {
    return h('p', { class: 'empty', id: 'autopilot-none' },
      'No autopilot controller yet: one starts when a request with preset autopilot (X-RouteBalance-Preset: autopilot and X-RouteBalance-Autopilot: p95_e2e_ms=…, or the key\'s or tenant\'s preset) reaches this cluster.');
  }
  return h('div', { class: 'stack', id: 'autopilot-controllers' }, ...ctrls.map(controllerView));
}

function controllerView(c) {
  const w = c.weights || {};
  const windows = c.windows || [];
  const pts = (f) => windows.map((x) => ({ t: Date.parse(x.end), y: f(x) }));
  const weights = timeChart({
    kind: 'line', height: 160, caption: 'Weights set by the autopilot', label: 'autopilot weights over time',
    series: [
      { name: 'quality', points: pts((x) => x.weights.quality) },
      { name: 'latency', points: pts((x) => x.weights.latency) },
      { name: 'cost', points: pts((x) => x.weights.cost) },
    ],
    yFormat: (v) => fmtNum(v, 2), place: 'raw', empty: 'No control step yet (every 5 s).',
  });
  const target = (c.targets.p95_e2e_ms || c.targets.p95_ttft_ms || 0) / 1000;
  const key = c.targets.p95_e2e_ms ? 'p95_e2e_ms' : 'p95_ttft_ms';
  const judged = windows.filter((x) => x.n > 0 && x[key] >= 0);
  const p95 = timeChart({
    kind: 'line', height: 160, caption: `Window ${key === 'p95_e2e_ms' ? 'p95 E2E' : 'p95 TTFT'} against the target`, label: 'window p95 over time',
    series: [{ name: 'p95 (s)', points: judged.map((x) => ({ t: Date.parse(x.end), y: x[key] / 1000 })) }],
    ref: target ? { y: target, label: `target ${fmtNum(target, 2)} s` } : undefined,
    yFormat: (v) => `${fmtNum(v, 2)} s`, place: 'raw', empty: 'No window with requests yet.',
  });
  const met = windows.filter((x) => x.n > 0);
  const decisions = (c.decisions || []).slice(-5).reverse();
  return h('div', { class: 'autopilot-controller', dataset: { targets: fmtTargets(c.targets) } },
    h('h3', {}, fmtTargets(c.targets)),
    h('p', { class: 'autopilot-summary' },
      'Weights now: ', h('span', { class: 'mono autopilot-weights' }, `quality ${fmtNum(w.quality, 2)} · latency ${fmtNum(w.latency, 2)} · cost ${fmtNum(w.cost, 2)}`),
      ' · targets met in ', h('strong', { class: 'autopilot-attainment' }, fmtPct(c.attainment)),
      ` of ${met.length} window${met.length === 1 ? '' : 's'}`,
      c.dropped_observations ? ` · ${c.dropped_observations} observations dropped` : ''),
    h('div', { class: 'grid2' }, weights, p95),
    decisions.length
      ? h('ul', { class: 'autopilot-decisions small' }, ...decisions.map((d) => h('li', {},
        h('span', { class: 'mono' }, new Date(d.at).toLocaleTimeString('en-US', { hour12: false })), ' ',
        h('strong', {}, d.action), ` — ${d.reason}`)))
      : null);
}
