// dom.js: a tiny element builder and the number formats the pages share.
// Everything is built with createElement/textContent — never innerHTML —
// so data from the API can never inject markup, and the strict CSP holds.

const SVG_NS = 'http://www.w3.org/2000/svg';

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2).toLowerCase(), v);
    } else if (k === 'value' || k === 'checked' || k === 'selected' || k === 'indeterminate') {
      el[k] = v;
    } else if (k === 'dataset') {
      Object.assign(el.dataset, v);
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** h builds an HTML element: h('button', {class: 'btn', onclick}, 'Save'). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

/** s builds an SVG element the same way. */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

/** replace swaps all children of el for the given ones. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

let uid = 0;
/** id returns a fresh element id with the given prefix. */
export function id(prefix) { uid += 1; return `${prefix}-${uid}`; }

/**
 * field builds a labelled form control with a slot for its error message.
 * The error element is tied to the control with aria-describedby, and
 * setError/clear toggle aria-invalid so screen readers announce it.
 */
export function field(label, control, { hint, wide } = {}) {
  const cid = control.id || id('f');
  control.id = cid;
  const err = h('p', { class: 'field-error', id: `${cid}-err`, 'aria-live': 'polite' });
  const hintEl = hint ? h('p', { class: 'field-hint', id: `${cid}-hint` }, hint) : null;
  control.setAttribute('aria-describedby', [hintEl && hintEl.id, err.id].filter(Boolean).join(' '));
  const wrap = h('div', { class: wide ? 'field wide' : 'field' },
    h('label', { for: cid }, label), control, hintEl, err);
  return {
    el: wrap, control,
    setError(msg) {
      err.textContent = msg || '';
      if (msg) control.setAttribute('aria-invalid', 'true'); else control.removeAttribute('aria-invalid');
    },
    clear() { this.setError(''); },
  };
}

/** toast shows a short status message at the bottom of the screen. */
export function toast(msg, kind = 'ok') {
  const t = document.getElementById('toast');
  if (!t) return;
  t.textContent = msg;
  t.dataset.kind = kind;
  t.classList.add('show');
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => t.classList.remove('show'), 3500);
}

/** copyText copies to the clipboard, falling back to a selected textarea. */
export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const ta = h('textarea', { class: 'offscreen', readonly: true }, text);
    document.body.appendChild(ta);
    ta.select();
    let ok = false;
    try { ok = document.execCommand('copy'); } catch { ok = false; }
    ta.remove();
    return ok;
  }
}

/** copyButton is a button that copies text() and says so. */
export function copyButton(text, label = 'Copy') {
  const b = h('button', { type: 'button', class: 'btn btn-small' }, label);
  b.addEventListener('click', async () => {
    const ok = await copyText(typeof text === 'function' ? text() : text);
    b.textContent = ok ? 'Copied' : 'Copy failed — select and copy';
    setTimeout(() => { b.textContent = label; }, 2000);
  });
  return b;
}

/** confirmDialog asks a yes/no question in a modal <dialog>; resolves to a boolean. */
export function confirmDialog(title, body, confirmLabel = 'Confirm', danger = true) {
  return new Promise((resolve) => {
    const ok = h('button', { type: 'button', class: danger ? 'btn btn-danger' : 'btn btn-primary' }, confirmLabel);
    const cancel = h('button', { type: 'button', class: 'btn' }, 'Cancel');
    const titleId = id('dlg');
    const dlg = h('dialog', { class: 'dialog', 'aria-labelledby': titleId },
      h('h2', { id: titleId }, title), h('p', {}, body), h('div', { class: 'actions' }, cancel, ok));
    const done = (v) => { dlg.close(); dlg.remove(); resolve(v); };
    ok.addEventListener('click', () => done(true));
    cancel.addEventListener('click', () => done(false));
    dlg.addEventListener('cancel', (e) => { e.preventDefault(); done(false); });
    document.body.appendChild(dlg);
    dlg.showModal();
    cancel.focus();
  });
}

// ---- formats --------------------------------------------------------------

const nf = new Intl.NumberFormat('en-US');
/** fmtInt formats a count: 12,345. */
export const fmtInt = (n) => (n === null || n === undefined || Number.isNaN(n) ? '—' : nf.format(Math.round(n)));
/** fmtNum formats with up to d decimals. */
export function fmtNum(n, d = 2) {
  if (n === null || n === undefined || Number.isNaN(n)) return '—';
  return Number(n).toLocaleString('en-US', { maximumFractionDigits: d });
}
// Precision rules, the same on every page: counts are whole numbers with
// separators; durations and dollars keep three significant digits (dollars
// at least two decimals, two decimals from $1 up); quality scores three
// decimals; shares one decimal.

/** sig3 rounds to three significant digits. */
function sig3(v) { return Number(Number(v).toPrecision(3)); }

/** fmtMs formats a duration in milliseconds: 0.42 ms, 12.3 ms, 850 ms, 2.31 s, 12.4 s, 125 s. */
export function fmtMs(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '—';
  const a = Math.abs(ms);
  if (a === 0) return '0 ms';
  if (a < 999.5) return `${sig3(ms).toLocaleString('en-US', { maximumFractionDigits: 3 })} ms`;
  return `${sig3(ms / 1000).toLocaleString('en-US', { maximumFractionDigits: 2 })} s`;
}
/** fmtUSD formats dollars: $12.35, $0.50, $0.123, $0.0012 (never "$0.00" for a non-zero amount). */
export function fmtUSD(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return '—';
  const a = Math.abs(v);
  const sign = v < 0 ? '-' : '';
  if (a === 0 || a >= 1) return `${sign}$${a.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
  const dec = Math.max(2, 2 - Math.floor(Math.log10(a)));
  let t = a.toFixed(Math.min(dec, 20));
  while (t.length > t.indexOf('.') + 3 && t.endsWith('0')) t = t.slice(0, -1);
  return `${sign}$${t}`;
}
/** fmtQ formats a quality score 0..1 with three decimals. */
export const fmtQ = (v) => (v === null || v === undefined || Number.isNaN(v) ? '—' : Number(v).toFixed(3));
/** fmtPct formats a share 0..1 as a percentage. */
export const fmtPct = (v) => (v === null || v === undefined || Number.isNaN(v) ? '—' : `${fmtNum(v * 100, 1)} %`);
/** fmtAgo formats the time since an ISO date: "3 min ago". */
export function fmtAgo(iso) {
  if (!iso) return 'never';
  const t = new Date(iso).getTime();
  if (Number.isNaN(t)) return '—';
  const s = Math.max(0, (Date.now() - t) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}
/** fmtDate formats an ISO date as a short local date-time. */
export function fmtDate(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleString('en-US', { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
}
