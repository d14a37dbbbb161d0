// data.js: reading the API's shapes the pages share — the current cluster
// and usage rows from GET /api/v1/usage.

import { list } from './api.js';
import { h, replace } from './dom.js';

const CLUSTER_KEY = 'routebalance.cluster';

/**
 * loadClusters returns {clusters, cluster, settings}: the tenant's clusters,
 * the one the dashboard works on (the last one picked here, else the
 * tenant's default_cluster_id, else the first) and the tenant settings.
 */
export async function loadClusters(api) {
  const [cl, settings] = await Promise.all([
    api.get('/clusters'),
    api.get('/settings').catch((e) => { if (e.notFound) return null; throw e; }),
  ]);
  const clusters = list(cl, 'clusters');
  const want = localStorage.getItem(CLUSTER_KEY) || (settings && settings.default_cluster_id) || '';
  const cluster = clusters.find((c) => c.id === want) || clusters[0] || null;
  return { clusters, cluster, settings };
}

/**
 * clusterPage is a page titled title that shows show(loadClusters()) in its
 * body once the clusters are read (or the error); it returns the page and
 * reload, which reads them again and redraws.
 */
export function clusterPage(ctx, title, show) {
  const root = h('div', { class: 'stack' }, h('p', { class: 'muted' }, 'Loading…'));
  const page = h('section', { class: 'page' }, h('div', { class: 'page-head' }, h('h1', {}, title)), root);
  async function reload() {
    let data;
    try {
      data = await loadClusters(ctx.api);
    } catch (e) {
      replace(root, h('p', { class: 'alert alert-error', role: 'alert' }, `Could not load clusters: ${e.message}`));
      return;
    }
    if (ctx.signal.aborted) return;
    replace(root, show(data));
  }
  reload();
  return { page, reload };
}

/** rememberCluster makes id the cluster the dashboard pages show. */
export function rememberCluster(id) {
  if (id) localStorage.setItem(CLUSTER_KEY, id); else localStorage.removeItem(CLUSTER_KEY);
}

function pick(o, ...names) {
  for (const n of names) if (o && o[n] !== undefined && o[n] !== null) return o[n];
  return undefined;
}

/**
 * usageRow reads one row of GET /api/v1/usage (billing.UsageRow: group,
 * requests, prompt_tokens, output_tokens, cost_usd, billed_usd,
 * mean_ttft_ms, p95_ttft_ms, mean_latency_ms, p95_latency_ms,
 * mean_predicted_quality) into the names the pages use.
 */
export function usageRow(r) {
  const num = (...n) => { const v = pick(r, ...n); return v === undefined ? null : Number(v); };
  return {
    key: String(pick(r, 'group', 'key', 'bucket', 'time', 'hour', 'day', 'model', 'instance_id', 'key_id') ?? ''),
    label: pick(r, 'label', 'name', 'key_name', 'instance', 'model'),
    requests: num('requests', 'count') ?? 0,
    promptTokens: num('prompt_tokens', 'input_tokens', 'tokens_in') ?? 0,
    outputTokens: num('output_tokens', 'completion_tokens', 'tokens_out') ?? 0,
    costUSD: num('cost_usd', 'cost') ?? 0,
    billedUSD: num('billed_usd', 'billed') ?? 0,
    meanE2E: num('mean_latency_ms', 'mean_e2e_ms'),
    p50E2E: num('p50_latency_ms', 'p50_e2e_ms'),
    p95E2E: num('p95_latency_ms', 'p95_e2e_ms'),
    meanTTFT: num('mean_ttft_ms'),
    p50TTFT: num('p50_ttft_ms'),
    p95TTFT: num('p95_ttft_ms'),
    quality: num('mean_predicted_quality'),
    errors: num('errors', 'error_count') ?? 0,
  };
}

/** fetchUsage calls GET /api/v1/usage and returns {totals, rows} in usageRow form. */
export async function fetchUsage(api, { from, to, groupBy }) {
  const q = new URLSearchParams({ from: from.toISOString(), to: to.toISOString(), group_by: groupBy });
  const resp = await api.get(`/usage?${q}`);
  const rows = list(resp, 'rows').map(usageRow);
  const totals = usageRow((resp && (resp.total || resp.totals)) || {});
  return { totals, rows };
}

/** bucketTime reads a time-bucket key as epoch ms (NaN when it is not a time). */
export function bucketTime(key) {
  const t = Date.parse(key);
  return t;
}

/** monthStart is 00:00 UTC on the first of the current month (the billing period). */
export function monthStart(now = new Date()) {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
}
