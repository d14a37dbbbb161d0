// pages/auth.js: sign up and log in. Server errors land next to the field
// they concern: a taken email (409) under the email, a weak password (400,
// param "password") under the password, wrong credentials (401) under the
// password without saying which of the two was wrong.

import { h, field } from '../dom.js';

function nextPath() {
  const n = new URLSearchParams(location.search).get('next') || '';
  // Only same-app paths: never let ?next= send the user off-site.
  return /^\/[a-z]/.test(n) && !n.startsWith('//') ? n : '';
}

function authForm(ctx, mode) {
  const isSignup = mode === 'signup';
  const fields = {};
  if (isSignup) {
    fields.name = field('Name or organisation', h('input', { name: 'name', autocomplete: 'organization', required: true, maxlength: 200 }));
  }
  fields.email = field('Email', h('input', { name: 'email', type: 'email', autocomplete: 'email', required: true, maxlength: 254 }));
  fields.password = field('Password', h('input', {
    name: 'password', type: 'password', required: true,
    autocomplete: isSignup ? 'new-password' : 'current-password',
    minlength: isSignup ? 10 : undefined,
  }), { hint: isSignup ? 'At least 10 characters, mixing letters with digits or symbols.' : undefined });
  const keep = h('input', { type: 'checkbox', name: 'persist', id: `persist-${mode}` });
  const formErr = h('p', { class: 'form-error', role: 'alert' });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary' }, isSignup ? 'Create account' : 'Log in');

  const form = h('form', { class: 'auth-form', novalidate: true },
    Object.values(fields).map((f) => f.el),
    h('div', { class: 'check' }, keep, h('label', { for: keep.id }, 'Keep me signed in on this device')),
    formErr,
    h('div', { class: 'actions' }, submit));

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    for (const f of Object.values(fields)) f.clear();
    formErr.textContent = '';
    const v = {
      email: fields.email.control.value.trim(),
      password: fields.password.control.value,
    };
    if (isSignup) v.name = fields.name.control.value.trim();
    let bad = false;
    if (isSignup && !v.name) { fields.name.setError('Enter a name.'); bad = true; }
    if (!v.email) { fields.email.setError('Enter your email address.'); bad = true; }
    else if (!fields.email.control.checkValidity()) { fields.email.setError('This does not look like an email address.'); bad = true; }
    if (!v.password) { fields.password.setError('Enter a password.'); bad = true; }
    else if (isSignup && [...v.password].length < 10) { fields.password.setError('Too weak: use at least 10 characters.'); bad = true; }
    if (bad) {
      form.querySelector('[aria-invalid="true"]')?.focus();
      return;
    }
    submit.disabled = true;
    try {
      const resp = await ctx.api.post(isSignup ? '/signup' : '/login', v, { auth: false });
      ctx.session.set(resp, { email: v.email, persist: keep.checked });
      ctx.navigate(nextPath() || (isSignup ? '/cluster' : '/overview'), { replace: true });
    } catch (err) {
      showError(err, fields, formErr, isSignup);
      form.querySelector('[aria-invalid="true"]')?.focus();
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

function showError(err, fields, formErr, isSignup) {
  const param = (err.param || '').toLowerCase();
  if (isSignup && err.status === 409) {
    fields.email.setError('An account with this email already exists. Log in instead?');
    return;
  }
  if (!isSignup && err.status === 401) {
    fields.password.setError('Wrong email or password.');
    return;
  }
  if (err.status === 400 || err.status === 422) {
    const target = fields[param] || (/password/i.test(err.message) ? fields.password
      : /email/i.test(err.message) ? fields.email : /name/i.test(err.message) ? fields.name : null);
    if (target) {
      const m = err.fieldMessage;
      target.setError(target === fields.password && isSignup ? `Too weak: ${m.charAt(0).toLowerCase()}${m.slice(1)}.`.replace(/\.\.$/, '.') : m);
      return;
    }
  }
  if (err.status === 429) {
    formErr.textContent = 'Too many attempts. Wait a minute and try again.';
    return;
  }
  formErr.textContent = err.status === 0 ? 'The server could not be reached. Check your connection and try again.' : err.message;
}

function page(ctx, mode) {
  const isSignup = mode === 'signup';
  const q = location.search;
  return h('section', { class: 'page auth' },
    h('div', { class: 'panel auth-panel' },
      h('h1', {}, isSignup ? 'Create your RouteBalance account' : 'Log in to RouteBalance'),
      h('p', { class: 'muted' }, isSignup
        ? 'Register your vLLM endpoints, get an API key, and choose how each request trades quality against latency and cost.'
        : 'Welcome back.'),
      authForm(ctx, mode),
      h('p', { class: 'switch' }, isSignup ? 'Already have an account? ' : 'New here? ',
        h('a', { href: (isSignup ? '/login' : '/signup') + q, 'data-link': true }, isSignup ? 'Log in' : 'Create an account'))));
}

/** login is the log-in page. */
export const login = { render: (ctx) => page(ctx, 'login') };
/** signup is the sign-up page. */
export const signup = { render: (ctx) => page(ctx, 'signup') };
