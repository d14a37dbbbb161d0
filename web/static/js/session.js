// session.js: the signed-in session — access and refresh tokens kept in
// Web Storage (sessionStorage by default, localStorage when the user asks to
// stay signed in), refreshed shortly before the access token expires.
//
// Why no CSRF token: the tokens travel only in the Authorization header,
// which a cross-site page cannot make the browser attach; no cookie is ever
// set or sent (fetch uses credentials: 'omit'). See web/README.md.

const KEY = 'routebalance.session';
const EARLY_MS = 60_000; // refresh this long before expiry
const DEFAULT_TTL_MS = 10 * 60_000; // when neither exp nor expires_in is known

/** jwtExpiry reads the exp claim (seconds) of a JWT as epoch ms, or 0. */
export function jwtExpiry(token) {
  try {
    const part = token.split('.')[1];
    const json = atob(part.replace(/-/g, '+').replace(/_/g, '/').padEnd(Math.ceil(part.length / 4) * 4, '='));
    const exp = JSON.parse(json).exp;
    return typeof exp === 'number' ? exp * 1000 : 0;
  } catch {
    return 0;
  }
}

/** Session holds the tokens and keeps them fresh. */
export class Session {
  constructor() {
    this.data = null;
    this.timer = 0;
    this.inflight = null;
    this.listeners = new Set();
    this.load();
    // Another tab logging out (or in) changes localStorage; follow it.
    window.addEventListener('storage', (e) => {
      if (e.key === KEY) { this.load(); this.emit(); }
    });
  }

  load() {
    const raw = sessionStorage.getItem(KEY) || localStorage.getItem(KEY);
    this.data = null;
    if (raw) {
      try { this.data = JSON.parse(raw); } catch { this.data = null; }
    }
    if (this.data && !this.data.refresh_token && this.data.expires_at < Date.now()) this.data = null;
    this.schedule();
  }

  onChange(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); }
  emit() { for (const fn of this.listeners) fn(this.signedIn); }

  get signedIn() { return !!(this.data && this.data.access_token); }
  get access() { return this.data ? this.data.access_token : ''; }
  get email() { return this.data ? this.data.email : ''; }

  /** set stores tokens from a signup/login/refresh response. */
  set(resp, { email, persist } = {}) {
    const prev = this.data || {};
    const access = resp.access_token;
    let expiresAt = jwtExpiry(access);
    if (!expiresAt && resp.expires_in) expiresAt = Date.now() + resp.expires_in * 1000;
    if (!expiresAt) expiresAt = Date.now() + DEFAULT_TTL_MS;
    this.data = {
      access_token: access,
      refresh_token: resp.refresh_token || prev.refresh_token || '',
      expires_at: expiresAt,
      email: email || prev.email || '',
      persist: persist === undefined ? !!prev.persist : !!persist,
    };
    const store = this.data.persist ? localStorage : sessionStorage;
    const other = this.data.persist ? sessionStorage : localStorage;
    other.removeItem(KEY);
    store.setItem(KEY, JSON.stringify(this.data));
    this.schedule();
    this.emit();
  }

  /** clear forgets the session everywhere. */
  clear() {
    this.data = null;
    sessionStorage.removeItem(KEY);
    localStorage.removeItem(KEY);
    clearTimeout(this.timer);
    this.emit();
  }

  schedule() {
    clearTimeout(this.timer);
    if (!this.data) return;
    const wait = Math.max(1000, this.data.expires_at - Date.now() - EARLY_MS);
    // setTimeout caps at ~24.8 days; tokens never live that long, but clamp anyway.
    this.timer = setTimeout(() => { this.refresh(); }, Math.min(wait, 2 ** 31 - 1));
  }

  /** ensureFresh refreshes when the access token is about to expire. */
  async ensureFresh() {
    if (!this.data) return false;
    if (this.data.expires_at - Date.now() > 15_000) return true;
    return this.refresh();
  }

  /**
   * refresh trades the refresh token for new tokens via POST /api/v1/refresh.
   * Concurrent callers share one request. Resolves to true on success; on
   * a 4xx the session is over and is cleared.
   */
  refresh() {
    if (this.inflight) return this.inflight;
    if (!this.data || !this.data.refresh_token) {
      if (this.data && this.data.expires_at <= Date.now()) this.clear();
      return Promise.resolve(false);
    }
    const rt = this.data.refresh_token;
    this.inflight = (async () => {
      try {
        const res = await fetch('/api/v1/refresh', {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
          body: JSON.stringify({ refresh_token: rt }),
          credentials: 'omit',
          cache: 'no-store',
        });
        if (!res.ok) {
          if (res.status >= 400 && res.status < 500) this.clear();
          return false;
        }
        this.set(await res.json());
        return true;
      } catch {
        // Network trouble: keep the session and try again in a while.
        clearTimeout(this.timer);
        this.timer = setTimeout(() => { this.refresh(); }, 15_000);
        return false;
      } finally {
        this.inflight = null;
      }
    })();
    return this.inflight;
  }
}
