// range.js: the period picker the Overview, Usage and Requests pages share —
// preset periods plus a custom date range (two date fields, both days
// included, in the browser's time zone). A range of up to three days is
// bucketed by hour, a longer one by day (the usage API's group_by).

import { h, id } from './dom.js';
import { monthStart } from './data.js';

const HOUR = 3600e3;
const DAY = 86400e3;

/** PERIODS are the preset choices; from(now) gives the start. */
export const PERIODS = {
  '6h': { label: 'Last 6 hours', from: (now) => new Date(now - 6 * HOUR) },
  '24h': { label: 'Last 24 hours', from: (now) => new Date(now - 24 * HOUR) },
  '7d': { label: 'Last 7 days', from: (now) => new Date(now - 7 * DAY) },
  '30d': { label: 'Last 30 days', from: (now) => new Date(now - 30 * DAY) },
  month: { label: 'This month (billing period)', from: (now) => monthStart(now) },
};

/** grouping picks the bucket for a span: hours up to three days, else days. */
export function grouping(fromMs, toMs) {
  return toMs - fromMs <= 3 * DAY ? { groupBy: 'hour', slot: HOUR } : { groupBy: 'day', slot: DAY };
}

function dateValue(d) {
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
}

/** localDay parses YYYY-MM-DD as local midnight (NaN when invalid). */
export function localDay(v) {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(v || '');
  if (!m) return NaN;
  return new Date(Number(m[1]), Number(m[2]) - 1, Number(m[3])).getTime();
}

/**
 * rangePicker builds the control. choices: preset keys in order; initial:
 * a preset key. onChange() fires when the range changes; value() returns
 * {from: Date, to: Date, groupBy, slot, label, custom} or null while a
 * custom range is invalid (the error is shown next to the fields).
 */
export function rangePicker({ choices, initial, onChange, selectId }) {
  const sel = h('select', { id: selectId || id('period') },
    choices.map((k) => h('option', { value: k, selected: k === initial }, PERIODS[k].label)),
    h('option', { value: 'custom' }, 'Custom range…'));
  const today = new Date();
  const fromIn = h('input', { type: 'date', id: id('from'), value: dateValue(new Date(today.getTime() - 6 * DAY)), max: dateValue(today) });
  const toIn = h('input', { type: 'date', id: id('to'), value: dateValue(today), max: dateValue(today) });
  const err = h('p', { class: 'field-error', 'aria-live': 'polite' });
  const custom = h('div', { class: 'range-custom', hidden: true },
    h('label', { for: fromIn.id }, 'From'), fromIn, h('label', { for: toIn.id }, 'to'), toIn, err);
  const el = h('div', { class: 'range-picker' },
    h('div', { class: 'inline-field' }, h('label', { for: sel.id }, 'Period'), sel), custom);

  function value() {
    const now = new Date();
    if (sel.value !== 'custom') {
      const from = PERIODS[sel.value].from(now);
      return { from, to: now, label: PERIODS[sel.value].label, custom: false, ...grouping(from.getTime(), now.getTime()) };
    }
    const f = localDay(fromIn.value);
    const t = localDay(toIn.value);
    err.textContent = '';
    if (Number.isNaN(f) || Number.isNaN(t)) { err.textContent = 'Pick both days.'; return null; }
    if (t < f) { err.textContent = 'The end day is before the start day.'; return null; }
    // Both days included: up to the next midnight, but never past now.
    const end = Math.min(new Date(t).setDate(new Date(t).getDate() + 1), now.getTime());
    if (end <= f) { err.textContent = 'That range is in the future.'; return null; }
    const label = fromIn.value === toIn.value ? fromIn.value : `${fromIn.value} – ${toIn.value}`;
    return { from: new Date(f), to: new Date(end), label, custom: true, ...grouping(f, end) };
  }
  sel.addEventListener('change', () => { custom.hidden = sel.value !== 'custom'; onChange(); });
  fromIn.addEventListener('change', onChange);
  toIn.addEventListener('change', onChange);
  return { el, value, select: sel };
}
