// chart.js: time-series charts on uPlot (vendored unmodified under
// ../vendor/uplot, MIT — see its README.md) plus horizontal share bars.
// uPlot brings the time axis (local time, sensible tick steps), the
// crosshair and a live legend; this module adds a hover tooltip, the
// bucket placement of the usage API's rows, zero-filled counts, an empty
// state and a one-point state (a single bucket is drawn as a bar on the
// axis, never as a dot floating in an empty plot). Charts size themselves
// to their container (ResizeObserver) and free uPlot when removed.

import uPlot from '../vendor/uplot/uPlot.esm.js';
import { h } from './dom.js';

/** PALETTE is the categorical colour order, chosen to stay apart for common colour-vision deficiencies. */
export const PALETTE = ['#3b4cca', '#e07a1f', '#1f9e89', '#c2397d', '#8a6d00', '#0b7bd3', '#7c3aed', '#6b7280'];

/** niceTicks returns 0..max in 1/2/5·10^k steps, about count of them. */
export function niceTicks(max, count = 4, integer = false) {
  if (!(max > 0)) return [0, 1];
  const raw = max / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const mults = integer && mag < 10 ? [1, 2, 5, 10] : [1, 2, 2.5, 5, 10];
  let step = mults.map((m) => m * mag).find((st) => max / st <= count) || 10 * mag;
  if (integer) step = Math.max(1, Math.round(step));
  const ticks = [];
  for (let v = 0; v < max + step * 0.999; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

/**
 * bucketTime places a bucket [start, start+slot) on the time axis: 'mid'
 * at the middle of the part that has elapsed by now (so the current hour
 * or day is not drawn in the future), 'end' at its end or now, whichever
 * is first (a running total is known at that time), 'start' at its start,
 * 'center' at the middle of the whole bucket (a bar spanning it).
 */
export function bucketTime(start, slot, now, how = 'mid') {
  if (!slot || how === 'start') return start;
  if (how === 'center') return start + slot / 2;
  const end = Math.min(start + slot, Math.max(start, now));
  return how === 'end' ? end : (start + end) / 2;
}

/**
 * alignSeries turns [{points: [{t, y}]}] into uPlot's columns: the sorted
 * union of times (ms) and one value array per series (null where a series
 * has no point). With zeroFill, a series' missing times are 0 instead.
 */
export function alignSeries(series, zeroFill = false) {
  const ts = [...new Set(series.flatMap((se) => se.points.map((p) => p.t)))].sort((a, b) => a - b);
  const idx = new Map(ts.map((t, i) => [t, i]));
  const cols = series.map((se) => {
    const col = new Array(ts.length).fill(zeroFill ? 0 : null);
    for (const p of se.points) if (p.y !== null && p.y !== undefined && !Number.isNaN(p.y)) col[idx.get(p.t)] = p.y;
    return col;
  });
  return { ts, cols };
}

/** fillBuckets adds a zero point for every bucket start in [from, to) that has none (counts). */
export function fillBuckets(points, from, to, slot) {
  if (!slot || !(to > from)) return points;
  const have = new Set(points.map((p) => p.t));
  const out = [...points];
  // Buckets are aligned to UTC hours / days like the server's group_by.
  for (let t = Math.floor(from / slot) * slot; t < to; t += slot) if (!have.has(t)) out.push({ t, y: 0 });
  return out.sort((a, b) => a.t - b.t);
}

function fmtWhen(ms, slot) {
  const d = new Date(ms);
  if (slot >= 86400e3) return d.toLocaleDateString('en-US', { timeZone: 'UTC', weekday: 'short', month: 'short', day: 'numeric' });
  return d.toLocaleString('en-US', { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', hour12: false });
}

/**
 * timeChart returns a <figure> that draws series over time.
 * opts: { kind: 'line'|'bar', series: [{name, points: [{t: bucket start ms, y}]}],
 *         yFormat(v) → string, ref: {y, label}, height, caption, label (accessible name),
 *         domain: [fromMs, toMs], integer (whole-number y ticks), slotMs (bucket width),
 *         place: 'mid'|'end'|'start' (see bucketTime), zeroFill (missing buckets are 0),
 *         now (ms, default Date.now()), empty (text) }.
 */
export function timeChart(opts) {
  const box = h('div', { class: 'chart-box' });
  const fig = h('figure', { class: 'chart' }, opts.caption ? h('figcaption', {}, opts.caption) : null, box);
  const now = opts.now ?? Date.now();
  const slot = opts.slotMs || 0;
  let series = opts.series.filter((se) => se.points.length);
  if (!series.length) {
    fig.classList.add('chart-empty');
    box.append(h('p', { class: 'empty' }, opts.empty || 'No data in this period yet.'));
    return fig;
  }
  if (opts.zeroFill && opts.domain) {
    series = series.map((se) => ({ ...se, points: fillBuckets(se.points, opts.domain[0], opts.domain[1], slot) }));
  }
  // A bar spans its whole bucket; a line point sits where its value holds.
  let place = opts.place || (opts.kind === 'bar' ? 'center' : 'mid');
  // One bucket only: a lone dot in an empty plot says little, so a line
  // chart draws the value as a level over its bucket (start to end or now).
  const startsAll = new Set(series.flatMap((se) => se.points.map((p) => p.t)));
  const single = startsAll.size === 1 && opts.kind !== 'bar' && slot > 0;
  if (single) {
    series = series.map((se) => ({ ...se, points: se.points.flatMap((p) => [{ t: p.t, y: p.y, start: p.t }, { t: Math.max(p.t + 1, Math.min(p.t + slot, now)), y: p.y, start: p.t }]) }));
    place = 'raw';
  }
  const placed = series.map((se) => ({ ...se, points: se.points.map((p) => ({ t: place === 'raw' ? p.t : bucketTime(p.t, slot, now, place), y: p.y, start: p.start ?? p.t })) }));
  const { ts, cols } = alignSeries(placed, !!opts.zeroFill);
  const starts = new Map(placed.flatMap((se) => se.points.map((p) => [p.t, p.start])));
  const bar = opts.kind === 'bar';
  const fmt = opts.yFormat || ((v) => String(v));
  let ymax = 0;
  for (const c of cols) for (const v of c) if (v > ymax) ymax = v;
  if (opts.ref && opts.ref.y > ymax) ymax = opts.ref.y;
  const height = opts.height || 200;
  const ticks = niceTicks(ymax * 1.05 || 1, height < 180 ? 3 : 4, !!opts.integer);
  const ytop = ticks[ticks.length - 1];

  let xmin = ts[0]; let xmax = ts[ts.length - 1];
  if (opts.domain) { xmin = Math.min(xmin, opts.domain[0]); xmax = Math.max(xmax, opts.domain[1]); }
  if (bar && slot) { xmin = Math.min(xmin, ts[0] - slot / 2); xmax = Math.max(xmax, ts[ts.length - 1] + slot / 2); }
  if (xmax <= xmin) { xmin -= slot || 3600e3; xmax += slot || 3600e3; }

  const data = [ts.map((t) => t / 1000), ...cols];
  const useries = [{
    label: 'Time',
    value: (u, v) => (v === null || v === undefined ? '—' : fmtWhen(starts.get(v * 1000) ?? v * 1000, slot)),
  }];
  placed.forEach((se, i) => {
    const color = se.color || PALETTE[i % PALETTE.length];
    const s = {
      label: se.name, stroke: color, width: single ? 3 : 2,
      value: (u, v) => (v === null || v === undefined ? '—' : fmt(v)),
      spanGaps: false,
      points: { show: (u, si) => single || countShown(u.data[si]) <= 3, size: single ? 6 : 7, fill: color },
    };
    if (bar) {
      // Bars are 75 % of the bucket spacing, at most 48 px (one bucket alone).
      s.paths = uPlot.paths.bars({ size: [0.75, 48, 2], align: 0 });
      s.fill = `${color}cc`;
      s.points = { show: false };
    } else if (opts.area) {
      s.fill = `${color}22`;
    }
    useries.push(s);
  });
  if (opts.ref && opts.ref.y > 0) {
    data.push(ts.map(() => opts.ref.y));
    useries.push({ label: opts.ref.label, stroke: '#b42318', width: 1.5, dash: [6, 4], points: { show: false }, value: () => fmt(opts.ref.y) });
  }

  const tip = h('div', { class: 'chart-tip', role: 'presentation', hidden: true });
  if (single) {
    const only = [...startsAll][0];
    fig.append(h('p', { class: 'chart-note' }, `Only ${slot >= 86400e3 ? 'one day' : 'one hour'} has data so far (${fmtWhen(only, slot)}); it is drawn as a level over that ${slot >= 86400e3 ? 'day' : 'hour'}.`));
  }
  const uopts = {
    width: 600, height,
    class: 'rb-uplot',
    scales: {
      x: { time: true, range: [xmin / 1000, xmax / 1000] },
      y: { range: [0, ytop] },
    },
    series: useries,
    axes: [
      { stroke: '#5b6475', grid: { stroke: '#eceef4', width: 1 }, ticks: { stroke: '#d5d9e3', width: 1, size: 4 }, font: '11px system-ui, sans-serif' },
      {
        stroke: '#5b6475', grid: { stroke: '#eceef4', width: 1 }, ticks: { show: false }, font: '11px system-ui, sans-serif',
        splits: () => ticks, values: (u, vals) => vals.map(fmt),
        size: Math.max(40, Math.ceil(Math.max(...ticks.map((v) => fmt(v).length)) * 6.6) + 14),
      },
    ],
    // Names only: the tooltip shows the hovered values.
    legend: { show: useries.length > 2, live: false },
    cursor: { drag: { x: false, y: false }, points: { size: 8 } },
    plugins: [tooltipPlugin(tip, useries, fmt, slot, starts, single)],
  };

  let u = null;
  let lastW = 0;
  const ro = new ResizeObserver(() => {
    if (!fig.isConnected) { ro.disconnect(); if (u) { u.destroy(); u = null; } return; }
    const w = Math.floor(box.clientWidth);
    if (!w || w === lastW) return;
    lastW = w;
    if (!u) {
      uopts.width = w;
      u = new uPlot(uopts, data, box);
      u.over.append(tip);
      box.setAttribute('role', 'img');
      box.setAttribute('aria-label', describe(opts, placed, fmt, slot));
    } else {
      u.setSize({ width: w, height });
    }
  });
  ro.observe(box);
  return fig;
}

function countShown(col) {
  let n = 0;
  for (const v of col) if (v !== null && v !== undefined) n++;
  return n;
}

/** describe is the chart's text alternative: the series and their last values. */
function describe(opts, series, fmt, slot) {
  const parts = series.map((se) => {
    const last = se.points[se.points.length - 1];
    return `${se.name}: ${se.points.length} point${se.points.length === 1 ? '' : 's'}${last ? `, last ${fmt(last.y)} at ${fmtWhen(last.start, slot)}` : ''}`;
  });
  return `${opts.label || opts.caption || 'chart'} — ${parts.join('; ')}`;
}

/** tooltipPlugin shows the hovered bucket's values next to the cursor. */
function tooltipPlugin(tip, useries, fmt, slot, starts, single) {
  return {
    hooks: {
      setCursor: (u) => {
        const i = u.cursor.idx;
        if (i === null || i === undefined || u.cursor.left < 0) { tip.hidden = true; return; }
        const t = u.data[0][i] * 1000;
        const rows = [];
        for (let s = 1; s < useries.length; s++) {
          const v = u.data[s][i];
          if (v === null || v === undefined || !u.series[s].show) continue;
          const sw = h('span', { class: 'swatch', 'aria-hidden': 'true' });
          sw.style.setProperty('--c', useries[s].stroke);
          rows.push(h('div', { class: 'chart-tip-row' }, sw, h('span', {}, useries[s].label), h('b', {}, fmt(v))));
        }
        if (!rows.length) { tip.hidden = true; return; }
        tip.replaceChildren(h('div', { class: 'chart-tip-when' }, fmtWhen(starts.get(t) ?? t, slot),
          slot ? h('span', { class: 'muted' }, slot >= 86400e3 ? ' (UTC day)' : ' (hour)') : null), ...rows,
        single ? h('div', { class: 'chart-tip-note' }, `only this ${slot >= 86400e3 ? 'day' : 'hour'} has data so far`) : null);
        tip.hidden = false;
        const left = u.cursor.left; const top = u.cursor.top;
        const w = u.over.clientWidth;
        const tw = tip.offsetWidth;
        tip.style.left = `${Math.max(0, Math.min(w - tw, left + 12 + tw > w ? left - tw - 12 : left + 12))}px`;
        tip.style.top = `${Math.max(0, top - 10)}px`;
      },
    },
  };
}

/**
 * shareBars draws each item's share of the total as a horizontal bar.
 * items: [{label, value}] — sorted largest first.
 */
export function shareBars(items, { caption, format, empty } = {}) {
  const total = items.reduce((a, it) => a + (it.value || 0), 0);
  const fig = h('figure', { class: 'chart share' }, caption ? h('figcaption', {}, caption) : null);
  if (!total) {
    fig.append(h('p', { class: 'empty' }, empty || 'No traffic in this period yet.'));
    return fig;
  }
  const list = h('ul', { class: 'share-list' });
  [...items].sort((a, b) => b.value - a.value).forEach((it, i) => {
    const frac = it.value / total;
    const fill = h('span', { class: 'share-fill' });
    fill.style.width = `${(frac * 100).toFixed(2)}%`;
    fill.style.background = PALETTE[i % PALETTE.length];
    list.append(h('li', { title: `${it.label}: ${(frac * 100).toFixed(1)} %${format ? ` (${format(it.value)})` : ''}` },
      h('span', { class: 'share-label' }, it.label),
      h('span', { class: 'share-track', role: 'img', 'aria-label': `${it.label}: ${(frac * 100).toFixed(1)} percent` }, fill),
      h('span', { class: 'share-val' }, `${(frac * 100).toFixed(1)} %`, format ? h('small', {}, ` ${format(it.value)}`) : null)));
  });
  fig.append(list);
  return fig;
}
