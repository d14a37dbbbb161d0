// csv.js: CSV downloads. The API authenticates with a bearer header (no
// cookie), so a plain link cannot carry the session: the button fetches
// the file through the API client and saves it from a blob: URL.

import { h, toast } from './dom.js';

/** csvLink is a button that downloads GET /api/v1{path}?{query} as a file. */
export function csvLink(ctx, path, query, label) {
  const b = h('button', { type: 'button', class: 'btn btn-small' }, label);
  b.addEventListener('click', async () => {
    b.disabled = true;
    try {
      const q = new URLSearchParams(Object.entries(query).filter(([, v]) => v !== '' && v !== undefined && v !== null));
      const blob = await ctx.api.blob(`${path}?${q}`);
      const url = URL.createObjectURL(blob);
      const a = h('a', { href: url, download: `${path.replace(/^\//, '').replace(/\.csv$/, '')}-${new Date().toISOString().slice(0, 10)}${query.group_by ? `-${query.group_by}` : ''}.csv`, class: 'offscreen' });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (e) {
      toast(e.notFound ? 'CSV export is not available on this server.' : `Could not export: ${e.message}`, 'error');
    } finally { b.disabled = false; }
  });
  return b;
}
