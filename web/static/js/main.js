// main.js: boots the dashboard — session, API client, History-API router
// and the page lifecycle (each page's timers stop when you leave it).

import { Session } from './session.js';
import { createApi } from './api.js';
import { h, replace, toast } from './dom.js';
import { rememberCluster } from './data.js';

const routes = {
  '/login': { load: () => import('./pages/auth.js').then((m) => m.login), auth: false, title: 'Log in' },
  '/signup': { load: () => import('./pages/auth.js').then((m) => m.signup), auth: false, title: 'Sign up' },
  '/overview': { load: () => import('./pages/overview.js'), title: 'Overview' },
  '/cluster': { load: () => import('./pages/cluster.js'), title: 'Cluster' },
  '/quality': { load: () => import('./pages/quality.js'), title: 'Quality data' },
  '/routing': { load: () => import('./pages/routing.js'), title: 'Routing' },
  '/requests': { load: () => import('./pages/requests.js'), title: 'Requests' },
  '/keys': { load: () => import('./pages/keys.js'), title: 'API keys' },
  '/usage': { load: () => import('./pages/usage.js'), title: 'Usage & billing' },
  '/docs': { load: () => import('./pages/docs.js'), title: 'Docs' },
};

const session = new Session();
let notice = '';
const api = createApi(session, (msg) => { notice = msg; session.clear(); });

let current = null; // { dispose }
let seq = 0;

/** navigate goes to an in-app path without a page load. */
export function navigate(path, { replace: rep = false } = {}) {
  if (rep) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  render();
}

function pageContext() {
  const timers = new Set();
  const aborts = new AbortController();
  return {
    api, session, navigate,
    signal: aborts.signal,
    /** every runs fn now and then every ms while the page is shown and the tab visible. */
    every(ms, fn) {
      let busy = false;
      const tick = async () => {
        if (busy || document.hidden || aborts.signal.aborted) return;
        busy = true;
        try { await fn(); } finally { busy = false; }
      };
      tick();
      const t = setInterval(tick, ms);
      timers.add(t);
      return () => { clearInterval(t); timers.delete(t); };
    },
    dispose() {
      aborts.abort();
      for (const t of timers) clearInterval(t);
      timers.clear();
    },
  };
}

async function render() {
  const my = ++seq;
  let path = location.pathname.replace(/\/+$/, '') || '/';
  if (path === '/' || path === '/index.html') path = session.signedIn ? '/overview' : '/login';
  const route = routes[path];
  if (route && route.auth !== false && !session.signedIn) {
    history.replaceState(null, '', `/login?next=${encodeURIComponent(path)}`);
    return render();
  }
  if (route && route.auth === false && session.signedIn) {
    history.replaceState(null, '', '/overview');
    return render();
  }
  if (path !== location.pathname) history.replaceState(null, '', path + location.search);
  if (current) { current.dispose(); current = null; }
  updateChrome(path);
  const main = document.getElementById('main');
  if (!route) {
    document.title = 'Not found — RouteBalance';
    replace(main, h('section', { class: 'page' }, h('h1', {}, 'Page not found'),
      h('p', {}, 'There is no page at ', h('code', {}, location.pathname), '. ',
        h('a', { href: '/', 'data-link': true }, 'Go to the dashboard'), '.')));
    return;
  }
  const ctx = pageContext();
  current = ctx;
  let mod;
  try {
    mod = await route.load();
  } catch (e) {
    replace(main, h('p', { class: 'alert alert-error' }, `Could not load this page: ${e.message}`));
    return;
  }
  if (my !== seq) { ctx.dispose(); return; }
  document.title = `${route.title} — RouteBalance`;
  const page = (mod.default || mod).render(ctx);
  const msg = notice;
  notice = '';
  replace(main, msg ? h('p', { class: 'alert alert-warn', role: 'alert' }, msg) : null, page);
  main.focus({ preventScroll: true });
  window.scrollTo(0, 0);
}

function updateChrome(path) {
  const signed = session.signedIn;
  document.getElementById('nav').hidden = !signed;
  document.getElementById('who').hidden = !signed;
  document.getElementById('who-email').textContent = session.email || '';
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.getAttribute('href') === path) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

document.addEventListener('click', (e) => {
  const a = e.target.closest('a[data-link]');
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  navigate(a.getAttribute('href'));
});
window.addEventListener('popstate', render);
let loggingOut = false;
document.getElementById('logout').addEventListener('click', () => {
  // Revoke this login on the server too (its refresh-token family), not
  // only in this tab; keepalive lets the request outlive the page change.
  const token = session.access;
  if (token) {
    fetch('/api/v1/logout', { method: 'POST', headers: { Authorization: `Bearer ${token}` }, credentials: 'omit', cache: 'no-store', keepalive: true }).catch(() => {});
  }
  loggingOut = true;
  rememberCluster('');
  session.clear();
  loggingOut = false;
  toast('Logged out.');
});
session.onChange((signed) => {
  const path = location.pathname;
  const route = routes[path];
  if (!signed && (!route || route.auth !== false)) {
    // An expired session comes back to where it was after logging in again.
    navigate(loggingOut || !route ? '/login' : `/login?next=${encodeURIComponent(path)}`, { replace: true });
  }
  else if (signed && route && route.auth === false) return; // the auth page navigates itself
  else updateChrome(path);
});

render();
