// api.js: the /api/v1 JSON client. Every call carries the access token as a
// bearer header (never a cookie), refreshes it first when it is about to
// expire, retries once after a refresh on 401, and otherwise ends the
// session on 401. Errors carry OpenAI's envelope fields (message, param,
// code) so forms can show them next to the right field.

/** ApiError is a failed API call. status 0 means the network failed. */
export class ApiError extends Error {
  constructor(status, body, text) {
    const e = (body && body.error) || {};
    super(e.message || (status ? `HTTP ${status}${text ? `: ${text.slice(0, 200)}` : ''}` : 'The server could not be reached.'));
    this.status = status;
    this.param = e.param || '';
    this.code = e.code || '';
    this.type = e.type || '';
  }
  /** fieldMessage is the message without a leading "param: ", capitalised, for showing under that field. */
  get fieldMessage() {
    let m = this.message;
    const i = m.indexOf(': ');
    if (this.param && i > 0 && m.slice(0, i).toLowerCase().endsWith(this.param.toLowerCase())) m = m.slice(i + 2);
    return m.charAt(0).toUpperCase() + m.slice(1);
  }
  /** notFound is true for 404 and 405 — the endpoint (or object) is not there. */
  get notFound() { return this.status === 404 || this.status === 405 || this.status === 501; }
}

/** createApi returns get/post/put/patch/del bound to the session. */
export function createApi(session, onSignedOut) {
  async function request(method, path, body, { auth = true, retried = false, raw = false } = {}) {
    if (auth) await session.ensureFresh();
    const headers = { Accept: raw ? 'text/csv, application/json' : 'application/json' };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    if (auth && session.access) headers.Authorization = `Bearer ${session.access}`;
    let res;
    try {
      res = await fetch(`/api/v1${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        credentials: 'omit',
        cache: 'no-store',
      });
    } catch {
      throw new ApiError(0, null, '');
    }
    if (res.status === 401 && auth) {
      if (!retried && (await session.refresh())) return request(method, path, body, { auth, retried: true, raw });
      onSignedOut('Your session ended. Please log in again.');
      throw new ApiError(401, await safeJSON(res), '');
    }
    if (res.status === 204) return null;
    if (raw && res.ok) return res.blob();
    const text = await res.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch { data = null; }
    }
    if (!res.ok) throw new ApiError(res.status, data, data ? '' : text);
    return data;
  }
  return {
    get: (p, o) => request('GET', p, undefined, o),
    post: (p, b, o) => request('POST', p, b === undefined ? {} : b, o),
    put: (p, b, o) => request('PUT', p, b, o),
    patch: (p, b, o) => request('PATCH', p, b, o),
    del: (p, o) => request('DELETE', p, undefined, o),
    /** blob GETs a non-JSON answer (CSV) as a Blob; errors still come as ApiError. */
    blob: (p, o) => request('GET', p, undefined, { ...o, raw: true }),
  };
}

async function safeJSON(res) {
  try { return await res.json(); } catch { return null; }
}

/** list accepts a bare array or an object wrapping one ({data|items|keys|…: [...]}). */
export function list(x, ...names) {
  if (Array.isArray(x)) return x;
  if (!x || typeof x !== 'object') return [];
  for (const n of [...names, 'data', 'items', 'results']) if (Array.isArray(x[n])) return x[n];
  return [];
}
