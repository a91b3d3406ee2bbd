// DOM building and formatting. Every piece of data reaches the page through
// textContent or an attribute set by setAttribute: nothing here parses HTML.
import { t, lang } from './i18n.js';

export const DASH = '—';

// h('td', {class: 'num', dataset: {jobId: 3}, onclick: fn}, 'text', child, [more])
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v == null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'dataset') for (const [dk, dv] of Object.entries(v)) { if (dv != null) el.dataset[dk] = String(dv); }
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'style') throw new Error('style attributes are not allowed (CSP); set el.style from code');
      else if (k === 'href') {
        const s = String(v);
        // Only the app's own routes and paths: data never becomes a URL of its own.
        // (Browsers read `/\host` or `/<tab>/host` as another site: check the resolved origin too.)
        if (!/^(#\/|\/[A-Za-z0-9_.~-])/.test(s) || new URL(s, location.href).origin !== location.origin) {
          throw new Error('refusing href ' + s);
        }
        el.setAttribute('href', s);
      } else if (k === 'value' || k === 'checked' || k === 'disabled' || k === 'selected' || k === 'open') el[k] = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  add(el, children);
  return el;
}

export function add(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export function clear(el, ...children) {
  el.replaceChildren();
  return add(el, children);
}

export const jobHref = (id) => '#/job/' + encodeURIComponent(String(id));
export const sweepHref = (id) => '#/sweep/' + encodeURIComponent(String(id));

export function jobLink(id, label) {
  if (id == null) return DASH;
  return h('a', { href: jobHref(id), class: 'job-link', dataset: { jobLink: id } }, label ?? String(id));
}

const known = (v) => v != null && !(typeof v === 'number' && !Number.isFinite(v));

export function num(v, digits = 0) {
  if (!known(v) || typeof v !== 'number') return DASH;
  return v.toLocaleString(lang(), { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

export function pct(v, digits = 0) {
  return known(v) ? num(v, digits) + '%' : DASH;
}

// Micro-dollars (the API's Micros) as money; absent is never $0.
export function money(micros) {
  if (!known(micros)) return DASH;
  return dollars(micros / 1e6);
}

export function dollars(d) {
  if (!known(d)) return DASH;
  const small = Math.abs(d) < 1 && d !== 0;
  return '$' + d.toLocaleString('en-US', {
    minimumFractionDigits: small ? 4 : 2,
    maximumFractionDigits: small ? 4 : 2,
  });
}

export function mib(v) {
  if (!known(v)) return DASH;
  return v >= 1024 ? num(v / 1024, 1) + ' GiB' : num(v) + ' MiB';
}

export function hours(v) {
  return known(v) ? num(v, v < 10 ? 2 : 1) : DASH;
}

export function duration(ms) {
  if (!known(ms) || ms < 0) return DASH;
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + 's';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm ' + String(s % 60).padStart(2, '0') + 's';
  const hr = Math.floor(m / 60);
  if (hr < 48) return hr + 'h ' + String(m % 60).padStart(2, '0') + 'm';
  return Math.floor(hr / 24) + 'd ' + (hr % 24) + 'h';
}

const sameDay = (a, b) => a.getFullYear() === b.getFullYear() && a.getMonth() === b.getMonth() && a.getDate() === b.getDate();

export function time(ms) {
  if (!known(ms)) return DASH;
  const d = new Date(ms);
  const opts = { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false };
  if (!sameDay(d, new Date())) Object.assign(opts, { year: 'numeric', month: '2-digit', day: '2-digit' });
  return d.toLocaleString(lang(), opts);
}

export function timeEl(ms) {
  if (!known(ms)) return DASH;
  return h('time', { datetime: new Date(ms).toISOString(), title: new Date(ms).toLocaleString(lang()) }, time(ms));
}

// A runtime that ticks while `end` is unknown (see tick()).
export function runtimeEl(start, end) {
  if (!known(start)) return DASH;
  if (known(end)) return duration(end - start);
  return h('span', { class: 'ticking', dataset: { tickStart: start } }, duration(Date.now() - start));
}

export function tick(root) {
  const now = Date.now();
  for (const el of root.querySelectorAll('[data-tick-start]')) {
    el.textContent = duration(now - Number(el.dataset.tickStart));
  }
}

export function stateBadge(state, extra) {
  return h('span', { class: 'badge state-' + state, dataset: { stateBadge: state } },
    t('state.' + state, null, state), extra);
}

export function text(v) {
  return v == null || v === '' ? DASH : String(v);
}

export function table(cls, heads, rows, empty) {
  const thead = h('thead', null, h('tr', null, heads.map((x) =>
    typeof x === 'string' ? h('th', null, x) : h('th', { class: x.class }, x.label))));
  const tbody = h('tbody', null, rows);
  if (!rows.length && empty) tbody.append(h('tr', { class: 'empty' }, h('td', { colspan: heads.length }, empty)));
  return h('div', { class: 'table-wrap' }, h('table', { class: 'grid ' + (cls || '') }, thead, tbody));
}

export function dl(pairs, cls) {
  const out = h('dl', { class: 'facts ' + (cls || '') });
  for (const [k, v] of pairs) {
    if (v === undefined) continue;
    out.append(h('div', { class: 'fact' }, h('dt', null, k), h('dd', null, v == null || v === '' ? DASH : v)));
  }
  return out;
}

export function card(title, ...body) {
  return h('section', { class: 'card' }, title ? h('h2', { class: 'card-title' }, title) : null, ...body);
}

export function debounce(fn, ms) {
  let timer = 0;
  const d = (...a) => { clearTimeout(timer); timer = setTimeout(() => fn(...a), ms); };
  d.cancel = () => clearTimeout(timer);
  return d;
}

// Toasts: the server's error text, shown, never swallowed.
export function toast(message, kind = 'error') {
  const box = document.getElementById('toasts');
  if (!box) return;
  const close = h('button', { class: 'toast-close', type: 'button', 'aria-label': t('close') }, '×');
  const el = h('div', { class: 'toast toast-' + kind, role: kind === 'error' ? 'alert' : 'status', dataset: { kind } },
    h('span', { class: 'toast-text' }, String(message)), close);
  const remove = () => el.remove();
  close.addEventListener('click', remove);
  box.append(el);
  setTimeout(remove, kind === 'error' ? 10000 : 4000);
  while (box.children.length > 5) box.firstElementChild.remove();
}

export function showError(err) {
  if (err && err.status === 401) return; // on its way to /login
  toast(err && err.message ? err.message : String(err), 'error');
}

// A confirmation in the page's <dialog id="confirm-dialog">: resolves true on #confirm-yes.
export function confirmDialog(message, yesLabel) {
  const dlg = document.getElementById('confirm-dialog');
  const yes = document.getElementById('confirm-yes');
  const no = document.getElementById('confirm-no');
  document.getElementById('confirm-text').textContent = message;
  yes.textContent = yesLabel || t('confirm.yes');
  no.textContent = t('confirm.no');
  return new Promise((resolve) => {
    const done = (v) => {
      yes.removeEventListener('click', onYes);
      no.removeEventListener('click', onNo);
      dlg.removeEventListener('close', onClose);
      if (dlg.open) dlg.close();
      resolve(v);
    };
    const onYes = () => done(true);
    const onNo = () => done(false);
    const onClose = () => done(false);
    yes.addEventListener('click', onYes);
    no.addEventListener('click', onNo);
    dlg.addEventListener('close', onClose);
    dlg.showModal();
    no.focus();
  });
}
