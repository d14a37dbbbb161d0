// chart.js: a small hand-written SVG chart helper — time-series lines and
// bars with nice axis ticks, an optional reference line (e.g. the budget),
// a legend, and <title> tooltips. Charts render at the container's real
// pixel width (ResizeObserver) so text stays legible from 375 px to 1440 px.

import { h, s } from './dom.js';

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

function timeTicks(min, max, n) {
  if (max <= min) return [min];
  const span = max - min;
  const steps = [60e3, 300e3, 900e3, 1800e3, 3600e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3, 86400e3, 2 * 86400e3, 7 * 86400e3];
  const step = steps.find((st) => span / st <= n) || steps[steps.length - 1];
  const out = [];
  const off = new Date(min).getTimezoneOffset() * 60e3;
  for (let t = Math.ceil((min - off) / step) * step + off; t <= max; t += step) out.push(t);
  return out.length ? out : [min];
}

function fmtTime(t, span) {
  const d = new Date(t);
  if (span > 2 * 86400e3) return d.toLocaleDateString('en-US', { month: 'short', day: 'numeric' });
  return d.toLocaleTimeString('en-US', { hour: '2-digit', minute: '2-digit', hour12: false });
}

/**
 * timeChart returns an element that draws series over time.
 * opts: { kind: 'line'|'bar', series: [{name, points: [{t: ms, y}]}],
 *         yFormat(v) → string, ref: {y, label}, height, label (accessible name),
 *         domain: [fromMs, toMs] (default: the data's extent), integer (y ticks),
 *         slotMs (bucket width: points are drawn at the bucket's middle) }.
 */
export function timeChart(opts) {
  const box = h('div', { class: 'chart-box' });
  const fig = h('figure', { class: 'chart' }, box);
  const series = opts.series.filter((se) => se.points.length);
  if (opts.caption) fig.prepend(h('figcaption', {}, opts.caption));
  if (!series.length) {
    box.append(h('p', { class: 'empty' }, opts.empty || 'No data in this period yet.'));
    return fig;
  }
  if (series.length > 1 || opts.ref) {
    fig.append(h('ul', { class: 'legend' },
      series.map((se, i) => h('li', {}, swatch(se.color || PALETTE[i % PALETTE.length]), se.name)),
      opts.ref ? h('li', {}, swatch('#b42318', true), opts.ref.label) : null));
  }
  let lastW = 0;
  const draw = () => {
    const w = Math.max(260, Math.floor(box.clientWidth || 600));
    if (w === lastW) return;
    lastW = w;
    box.replaceChildren(svgChart(w, opts, series));
  };
  const ro = new ResizeObserver(draw);
  ro.observe(box);
  requestAnimationFrame(draw);
  return fig;
}

function swatch(color, dashed) {
  const sw = h('span', { class: dashed ? 'swatch dashed' : 'swatch', 'aria-hidden': 'true' });
  sw.style.setProperty('--c', color);
  return sw;
}

function svgChart(w, opts, series) {
  const H = opts.height || 200;
  const fmt = opts.yFormat || ((v) => String(v));
  const m = { l: 56, r: 14, t: 10, b: 26 };
  let tmin = Infinity; let tmax = -Infinity; let ymax = 0;
  for (const se of series) for (const p of se.points) {
    tmin = Math.min(tmin, p.t); tmax = Math.max(tmax, p.t); ymax = Math.max(ymax, p.y || 0);
  }
  if (opts.ref && opts.ref.y > 0) ymax = Math.max(ymax, opts.ref.y);
  const bar = opts.kind === 'bar';
  const slot = opts.slotMs || 3600e3;
  // Points are bucket starts; draw them at the bucket's middle.
  const mid = opts.slotMs ? slot / 2 : 0;
  tmin += mid; tmax += mid;
  if (opts.domain) {
    tmin = Math.min(tmin, opts.domain[0]);
    tmax = Math.max(tmax, opts.domain[1]);
  } else {
    if (bar) { tmin -= slot / 2; tmax += slot / 2; }
    if (tmax === tmin) { tmin -= slot; tmax += slot; }
  }
  const yt = niceTicks(ymax * 1.05 || 1, H - m.t - m.b < 150 ? 3 : 4, !!opts.integer);
  const ytop = yt[yt.length - 1];
  // Room for the longest y label (11 px text, about 6.5 px per character).
  m.l = Math.max(40, Math.ceil(Math.max(...yt.map((v) => fmt(v).length)) * 6.5) + 12);
  const pw = w - m.l - m.r;
  const ph = H - m.t - m.b;
  const X = (t) => m.l + ((t - tmin) / (tmax - tmin)) * pw;
  const Y = (v) => m.t + ph - (v / ytop) * ph;
  const svg = s('svg', { width: w, height: H, viewBox: `0 0 ${w} ${H}`, role: 'img', 'aria-label': opts.label || opts.caption || 'chart' });
  for (const v of yt) {
    svg.append(s('line', { x1: m.l, x2: w - m.r, y1: Y(v), y2: Y(v), class: 'grid' }));
    svg.append(s('text', { x: m.l - 6, y: Y(v) + 4, 'text-anchor': 'end', class: 'tick' }, fmt(v)));
  }
  const span = tmax - tmin;
  for (const t of timeTicks(tmin, tmax, Math.max(2, Math.floor(pw / 90)))) {
    const x = X(t);
    const anchor = x > w - m.r - 24 ? 'end' : x < m.l + 24 ? 'start' : 'middle';
    svg.append(s('text', { x, y: H - 8, 'text-anchor': anchor, class: 'tick' }, fmtTime(t, span)));
  }
  svg.append(s('line', { x1: m.l, x2: w - m.r, y1: Y(0), y2: Y(0), class: 'axis' }));
  series.forEach((se, i) => {
    const color = se.color || PALETTE[i % PALETTE.length];
    const pts = [...se.points].sort((a, b) => a.t - b.t);
    if (bar) {
      const n = series.length;
      const bw = Math.max(2, Math.min(40, (X(tmin + slot) - X(tmin)) * 0.8 / n));
      for (const p of pts) {
        const x = X(p.t + mid) - (bw * n) / 2 + i * bw;
        svg.append(s('rect', { x, y: Y(p.y || 0), width: bw, height: Math.max(0, Y(0) - Y(p.y || 0)), fill: color },
          s('title', {}, `${se.name}: ${fmt(p.y)} at ${new Date(p.t).toLocaleString()}`)));
      }
    } else {
      const d = pts.map((p, k) => `${k ? 'L' : 'M'}${X(p.t + mid).toFixed(1)},${Y(p.y || 0).toFixed(1)}`).join('');
      svg.append(s('path', { d, fill: 'none', stroke: color, 'stroke-width': 2, 'stroke-linejoin': 'round' }));
      if (pts.length <= 60) {
        for (const p of pts) {
          svg.append(s('circle', { cx: X(p.t + mid), cy: Y(p.y || 0), r: 3, fill: color },
            s('title', {}, `${se.name}: ${fmt(p.y)} at ${new Date(p.t).toLocaleString()}`)));
        }
      }
    }
  });
  if (opts.ref && opts.ref.y > 0) {
    svg.append(s('line', { x1: m.l, x2: w - m.r, y1: Y(opts.ref.y), y2: Y(opts.ref.y), class: 'ref' },
      s('title', {}, `${opts.ref.label}: ${fmt(opts.ref.y)}`)));
  }
  return svg;
}

/**
 * shareBars draws each item's share of the total as a horizontal bar.
 * items: [{label, value}] — sorted largest first.
 */
export function shareBars(items, { caption, format } = {}) {
  const total = items.reduce((a, it) => a + (it.value || 0), 0);
  const fig = h('figure', { class: 'chart share' }, caption ? h('figcaption', {}, caption) : null);
  if (!total) {
    fig.append(h('p', { class: 'empty' }, 'No traffic in this period yet.'));
    return fig;
  }
  const list = h('ul', { class: 'share-list' });
  [...items].sort((a, b) => b.value - a.value).forEach((it, i) => {
    const frac = it.value / total;
    const fill = h('span', { class: 'share-fill' });
    fill.style.width = `${(frac * 100).toFixed(2)}%`;
    fill.style.background = PALETTE[i % PALETTE.length];
    list.append(h('li', {},
      h('span', { class: 'share-label', title: it.label }, it.label),
      h('span', { class: 'share-track', role: 'img', 'aria-label': `${it.label}: ${(frac * 100).toFixed(1)} percent` }, fill),
      h('span', { class: 'share-val' }, `${(frac * 100).toFixed(1)} %`, format ? h('small', {}, ` ${format(it.value)}`) : null)));
  });
  fig.append(list);
  return fig;
}
