// Live updates: one stream of /v1/events (server-sent events) for the whole
// app; `job` and `alert` events go to whoever listens. It is read with fetch,
// not EventSource, because every request of a session carries its CSRF header
// and EventSource cannot send one. It reconnects with Last-Event-ID, so
// nothing is missed across a drop; a 401/403 goes to /login.
import { csrfToken, toLogin } from './api.js';

const listeners = new Set();
let statusEl = null;
let started = false;
let lastId = null;

export function onFeed(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function setStatus(s) {
  if (statusEl) statusEl.dataset.state = s;
}

function dispatch(type, data) {
  if (type !== 'job' && type !== 'alert') return;
  let item;
  try {
    item = JSON.parse(data);
  } catch (e) {
    return;
  }
  for (const fn of [...listeners]) {
    try {
      fn(type, item);
    } catch (e) {
      console.warn('feed listener', e);
    }
  }
}

// One connection until it ends; returns false when the session is gone.
async function connect() {
  const headers = { Accept: 'text/event-stream', 'X-CSRF-Token': csrfToken() };
  if (lastId) headers['Last-Event-ID'] = lastId;
  const res = await fetch('/v1/events', { headers, credentials: 'same-origin', cache: 'no-store' });
  if (res.status === 401 || res.status === 403) {
    toLogin();
    return false;
  }
  if (!res.ok || !res.body) throw new Error('HTTP ' + res.status);
  setStatus('open');
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let ev = { type: 'message', data: [], id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return true;
    buf += value;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      let line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (ev.id != null) lastId = ev.id;
        if (ev.data.length) dispatch(ev.type, ev.data.join('\n'));
        ev = { type: 'message', data: [], id: null };
        continue;
      }
      if (line[0] === ':') continue; // keep-alive comment
      const c = line.indexOf(':');
      const field = c < 0 ? line : line.slice(0, c);
      let val = c < 0 ? '' : line.slice(c + 1);
      if (val[0] === ' ') val = val.slice(1);
      if (field === 'event') ev.type = val;
      else if (field === 'data') ev.data.push(val);
      else if (field === 'id') ev.id = val;
    }
  }
}

async function run() {
  let retry = 0;
  for (;;) {
    setStatus('connecting');
    try {
      if (!(await connect())) return;
      retry = 0;
    } catch (e) {
      retry = Math.min(retry + 1, 5);
    }
    setStatus('closed');
    await new Promise((r) => setTimeout(r, 500 * 2 ** retry));
  }
}

export function startFeed(indicator) {
  statusEl = indicator;
  if (!started) {
    started = true;
    run();
  }
}
