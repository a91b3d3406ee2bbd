// The daemon's API as the dashboard calls it: same origin, the session cookie,
// and on every request the session's CSRF secret (X-CSRF-Token), which the
// login page put in this origin's localStorage (`gpuq.csrf`): the cookie alone
// opens nothing. A 401 anywhere means the session is gone: back to /login.
import { t } from './i18n.js';

export const CSRF_KEY = 'gpuq.csrf';
let csrf = '';
try { csrf = localStorage.getItem(CSRF_KEY) || ''; } catch (e) { /* storage off: every call is refused */ }
export const csrfToken = () => csrf;
export const session = { user: '', admin: false, expires_at: 0 };

export class ApiError extends Error {
  constructor(status, message, field) {
    super(message);
    this.status = status;
    this.field = field;
  }
}

let leaving = false;
export function toLogin() {
  if (!leaving) {
    leaving = true;
    // Back to this page after logging in (a "View run" link opened without a session).
    const here = /^#\/[^#]*$/.test(location.hash || '') ? location.hash : '';
    location.replace('/login' + here);
  }
}

async function request(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json', 'X-CSRF-Token': csrf }, cache: 'no-store' };
  if (method !== 'GET') {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body ?? {});
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, t('err.network'));
  }
  // A 403 from /auth/session: a live cookie without its CSRF secret (another
  // tab logged out, storage was cleared): log in again.
  if (res.status === 401 || (res.status === 403 && path === '/auth/session')) {
    toLogin();
    throw new ApiError(401, t('err.session'));
  }
  if (!res.ok) {
    let msg = '', field;
    try {
      const j = await res.json();
      msg = j.error || j.message || '';
      field = j.field;
    } catch (e) { /* not JSON */ }
    throw new ApiError(res.status, msg || t('err.http', { status: res.status }), field);
  }
  return res;
}

export async function loadSession() {
  const s = await (await request('GET', '/auth/session')).json();
  if (s.csrf) csrf = s.csrf;
  Object.assign(session, s);
  return session;
}

export const get = async (path) => (await request('GET', path)).json();

export async function getPage(path) {
  const res = await request('GET', path);
  return { data: await res.json(), headers: res.headers };
}

export const getRaw = (path) => request('GET', path);

export async function post(path, body) {
  const res = await request('POST', path, body);
  const txt = await res.text();
  return txt ? JSON.parse(txt) : null;
}

export async function logout() {
  try {
    await post('/auth/logout');
  } finally {
    try { localStorage.removeItem(CSRF_KEY); } catch (e) { /* storage off */ }
  }
}

// Query string from an object, leaving out empty values.
export function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v != null && v !== '') u.set(k, String(v));
  }
  const s = u.toString();
  return s ? '?' + s : '';
}

// Who may act on a job: its owner or an admin (the server checks again).
export const mayAct = (job) => session.admin || job.user === session.user;
