// triangle.js: the weight picker on the simplex w_quality + w_latency +
// w_cost = 1. A point inside a triangle whose corners are Quality (top),
// Latency (bottom left) and Cost (bottom right); its barycentric
// coordinates are the three weights. Drag it with a pointer, or focus it and
// use the keys:
//   ↑ / ↓      more / less quality (latency:cost ratio kept)
//   ← / →      trade cost for latency / latency for cost (quality kept)
//   Shift      steps of 0.10 instead of 0.01
//   Home       balanced (⅓ each)

import { h, s, id } from './dom.js';

const W = 320;
const H = 290;
const CORNER = {
  quality: { x: W / 2, y: 28 },
  latency: { x: 30, y: H - 34 },
  cost: { x: W - 30, y: H - 34 },
};

/** toPoint maps weights to the triangle's coordinates. */
export function toPoint(w) {
  return {
    x: w.quality * CORNER.quality.x + w.latency * CORNER.latency.x + w.cost * CORNER.cost.x,
    y: w.quality * CORNER.quality.y + w.latency * CORNER.latency.y + w.cost * CORNER.cost.y,
  };
}

/** fromPoint maps a point to barycentric weights, projected into the triangle. */
export function fromPoint(x, y) {
  const { quality: A, latency: B, cost: C } = CORNER;
  const det = (B.y - C.y) * (A.x - C.x) + (C.x - B.x) * (A.y - C.y);
  let q = ((B.y - C.y) * (x - C.x) + (C.x - B.x) * (y - C.y)) / det;
  let l = ((C.y - A.y) * (x - C.x) + (A.x - C.x) * (y - C.y)) / det;
  let c = 1 - q - l;
  q = Math.max(0, q); l = Math.max(0, l); c = Math.max(0, c);
  const sum = q + l + c;
  return { quality: q / sum, latency: l / sum, cost: c / sum };
}

/** snap puts weights on the 0.01 grid, keeping the sum exactly 1. */
export function snap(w) {
  let q = Math.round(w.quality * 100);
  let l = Math.round(w.latency * 100);
  q = Math.min(100, Math.max(0, q));
  l = Math.min(100 - q, Math.max(0, l));
  const c = 100 - q - l;
  return { quality: q / 100, latency: l / 100, cost: c / 100 };
}

/**
 * display formats the three weights with d decimals by largest remainder,
 * so the shown numbers always add up to exactly 1.
 */
export function display(w, d = 2) {
  const k = 10 ** d;
  const names = ['quality', 'latency', 'cost'];
  const raw = names.map((n) => w[n] * k);
  const fl = raw.map(Math.floor);
  let left = k - fl.reduce((a, b) => a + b, 0);
  const order = raw.map((v, i) => [v - fl[i], i]).sort((a, b) => b[0] - a[0]);
  for (const [, i] of order) { if (left <= 0) break; fl[i] += 1; left -= 1; }
  return Object.fromEntries(names.map((n, i) => [n, (fl[i] / k).toFixed(d)]));
}

/** nudge applies one keyboard step to w. */
export function nudge(w, key, step) {
  let { quality: q, latency: l, cost: c } = w;
  if (key === 'ArrowUp' || key === 'ArrowDown') {
    const nq = Math.min(1, Math.max(0, q + (key === 'ArrowUp' ? step : -step)));
    const rest = 1 - nq;
    const lc = l + c;
    l = lc > 1e-9 ? (l / lc) * rest : rest / 2;
    c = rest - l;
    q = nq;
  } else if (key === 'ArrowLeft' || key === 'ArrowRight') {
    const d = key === 'ArrowLeft' ? Math.min(step, c) : -Math.min(step, l);
    l += d; c -= d;
  } else if (key === 'Home') {
    return { quality: 1 / 3, latency: 1 / 3, cost: 1 / 3 };
  } else {
    return null;
  }
  return snap({ quality: q, latency: l, cost: c });
}

/**
 * trianglePicker builds the control. onInput(w) fires while the point moves,
 * onChange(w) when a move ends (pointer up, key press). markers: [{label, w}]
 * draws the presets as small dots.
 */
export function trianglePicker({ value, onInput, onChange, markers = [] }) {
  let w = { ...value };
  const handle = s('circle', { r: 10, class: 'tri-handle' });
  const focusRing = s('circle', { r: 15, class: 'tri-ring' });
  const grid = s('g', { class: 'tri-grid' });
  for (let t = 0.2; t < 0.99; t += 0.2) {
    // Lines of constant quality, latency and cost at t.
    for (const [a, b, cc] of [['quality', 'latency', 'cost'], ['latency', 'cost', 'quality'], ['cost', 'quality', 'latency']]) {
      const p1 = toPoint({ [a]: t, [b]: 1 - t, [cc]: 0 });
      const p2 = toPoint({ [a]: t, [b]: 0, [cc]: 1 - t });
      grid.append(s('line', { x1: p1.x, y1: p1.y, x2: p2.x, y2: p2.y }));
    }
  }
  const tri = `${CORNER.quality.x},${CORNER.quality.y} ${CORNER.latency.x},${CORNER.latency.y} ${CORNER.cost.x},${CORNER.cost.y}`;
  const labelId = id('tri');
  const svg = s('svg', {
    viewBox: `0 0 ${W} ${H}`, class: 'tri-svg', role: 'slider', tabindex: 0,
    'aria-labelledby': labelId, 'aria-roledescription': 'weight triangle',
    'aria-valuemin': 0, 'aria-valuemax': 1,
  },
  s('polygon', { points: tri, class: 'tri-bg' }),
  grid,
  s('polygon', { points: tri, class: 'tri-edge' }),
  s('text', { x: CORNER.quality.x, y: CORNER.quality.y - 12, 'text-anchor': 'middle', class: 'tri-label' }, 'Quality'),
  s('text', { x: CORNER.latency.x - 4, y: CORNER.latency.y + 24, 'text-anchor': 'start', class: 'tri-label' }, 'Latency'),
  s('text', { x: CORNER.cost.x + 4, y: CORNER.cost.y + 24, 'text-anchor': 'end', class: 'tri-label' }, 'Cost'),
  markers.map((m) => {
    const p = toPoint(m.w);
    return s('g', { class: 'tri-marker' }, s('circle', { cx: p.x, cy: p.y, r: 4 }));
  }),
  focusRing, handle,
  // Preset labels are drawn after the handle, clear of its radius and with
  // a halo, so the handle resting on a preset never hides its letter.
  markers.map((m) => {
    const p = toPoint(m.w);
    return s('text', { x: p.x + 14, y: p.y + 4, class: 'tri-marker-label' }, m.label);
  }));

  const readout = h('p', { class: 'tri-readout', id: labelId });

  function draw() {
    const p = toPoint(w);
    for (const c of [handle, focusRing]) { c.setAttribute('cx', p.x); c.setAttribute('cy', p.y); }
    const d = display(w);
    readout.replaceChildren(
      h('span', { class: 'wq' }, 'Quality ', h('b', {}, d.quality)), ' + ',
      h('span', { class: 'wl' }, 'Latency ', h('b', {}, d.latency)), ' + ',
      h('span', { class: 'wc' }, 'Cost ', h('b', {}, d.cost)), ' = ', h('b', {}, '1.00'));
    svg.setAttribute('aria-valuenow', d.quality);
    svg.setAttribute('aria-valuetext', `quality ${d.quality}, latency ${d.latency}, cost ${d.cost}`);
  }

  function pointFromEvent(e) {
    const m = svg.getScreenCTM();
    if (!m) return null;
    const pt = new DOMPoint(e.clientX, e.clientY).matrixTransform(m.inverse());
    return snap(fromPoint(pt.x, pt.y));
  }

  let dragging = false;
  svg.addEventListener('pointerdown', (e) => {
    if (e.button !== 0) return;
    const nw = pointFromEvent(e);
    if (!nw) return;
    dragging = true;
    svg.setPointerCapture(e.pointerId);
    svg.focus({ preventScroll: true });
    w = nw; draw(); onInput && onInput(w);
    e.preventDefault();
  });
  svg.addEventListener('pointermove', (e) => {
    if (!dragging) return;
    const nw = pointFromEvent(e);
    if (!nw) return;
    w = nw; draw(); onInput && onInput(w);
  });
  const end = () => {
    if (!dragging) return;
    dragging = false;
    onChange && onChange(w);
  };
  svg.addEventListener('pointerup', end);
  svg.addEventListener('pointercancel', end);
  svg.addEventListener('keydown', (e) => {
    const nw = nudge(w, e.key, e.shiftKey ? 0.1 : 0.01);
    if (!nw) return;
    e.preventDefault();
    w = nw; draw();
    onInput && onInput(w);
    onChange && onChange(w);
  });

  draw();
  const el = h('div', { class: 'tri' }, svg, readout,
    h('p', { class: 'field-hint' }, 'Drag the point, or focus it and use the arrow keys: ↑/↓ quality, ←/→ latency vs cost, Shift for bigger steps, Home for balanced.'));
  return {
    el,
    get value() { return { ...w }; },
    set(nw) { w = { ...nw }; draw(); },
  };
}
