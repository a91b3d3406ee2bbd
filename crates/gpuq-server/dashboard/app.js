// The gpuq dashboard: the session, the header, the hash router and the live feed.
// Pages are modules under js/; each mount(root, route, app) returns
// {update?(route), feed?(type, item), destroy()}.
import { h, clear, showError, toast } from './js/dom.js';
import { loadSession, session, logout, get } from './js/api.js';
import { startFeed, onFeed } from './js/live.js';
import { t, lang, setLang, LANGS } from './js/i18n.js';
import * as queue from './js/queue.js';
import * as job from './js/job.js';
import * as gpus from './js/gpus.js';
import * as sweeps from './js/sweeps.js';
import * as cost from './js/cost.js';
import * as alerts from './js/alerts.js';
import * as sessions from './js/sessions.js';
import * as run from './js/run.js';

const PAGES = {
  queue: { mount: queue.mount, nav: 'queue' },
  job: { mount: job.mount, nav: 'queue', arg: true },
  gpus: { mount: gpus.mount, nav: 'gpus' },
  sweeps: { mount: sweeps.mountList, nav: 'sweeps' },
  sweep: { mount: sweeps.mountDetail, nav: 'sweeps', arg: true },
  cost: { mount: cost.mount, nav: 'cost' },
  alerts: { mount: alerts.mount, nav: 'alerts' },
  sessions: { mount: sessions.mount, nav: 'sessions' },
  // The MLflow client's "View run" link: #/experiments/E/runs/R.
  experiments: { mount: run.mount, nav: 'queue' },
};
const NAV = ['queue', 'gpus', 'sweeps', 'cost', 'sessions', 'alerts'];

// '#/job/12?x=1' -> {name: 'job', arg: '12', params}
export function parseHash(hash) {
  const raw = (hash || '').replace(/^#\/?/, '');
  const [path, query] = [raw.split('?')[0], raw.includes('?') ? raw.slice(raw.indexOf('?') + 1) : ''];
  const parts = path.split('/').filter(Boolean).map((p) => { try { return decodeURIComponent(p); } catch (e) { return p; } });
  let name = parts[0] || 'queue';
  if (!Object.hasOwn(PAGES, name)) name = 'notfound';
  return { name, arg: parts[1] ?? null, parts, params: new URLSearchParams(query), hash: '#/' + raw };
}

const app = {
  page: null,
  route: null,
  navigate(hash) {
    if (location.hash === hash) render(true);
    else location.hash = hash;
  },
};

const header = document.getElementById('topbar');
const main = document.getElementById('main');
const status = h('span', { id: 'live-status', class: 'live-dot', dataset: { state: 'connecting' }, title: t('live.title') });
const drained = h('span', { id: 'drained-badge', class: 'badge warn', hidden: true }, t('queue.drained'));

function renderHeader() {
  const navLinks = NAV.map((n) => h('a', { href: '#/' + n, class: 'nav-link', dataset: { nav: n } }, t('nav.' + n)));
  const select = h('select', { id: 'lang-select', 'aria-label': t('lang.label') },
    LANGS.map(([code, label]) => h('option', { value: code, selected: code === lang() }, label)));
  select.addEventListener('change', () => { setLang(select.value); renderHeader(); render(true); });
  const out = h('button', { type: 'button', class: 'btn btn-small btn-ghost', id: 'logout' }, t('logout'));
  out.addEventListener('click', async () => {
    try { await logout(); } catch (e) { if (e.status !== 401) { showError(e); return; } }
    location.replace('/login');
  });
  status.title = t('live.title');
  drained.textContent = t('queue.drained');
  clear(header,
    h('a', { href: '#/queue', class: 'brand' }, h('span', { class: 'brand-mark' }, 'gpuq')),
    h('nav', { class: 'nav', 'aria-label': t('nav.label') }, navLinks),
    h('div', { class: 'top-right' },
      drained, status,
      h('span', { id: 'user-name', class: 'user-name' }, session.user, session.admin ? h('span', { class: 'tag' }, t('admin')) : null),
      select, out));
  markNav();
}

function markNav() {
  const current = app.route ? (Object.hasOwn(PAGES, app.route.name) ? PAGES[app.route.name] : {}).nav : null;
  for (const a of header.querySelectorAll('[data-nav]')) {
    if (a.dataset.nav === current) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

function render(force) {
  const route = parseHash(location.hash);
  const same = app.route && app.page && app.route.name === route.name && app.route.arg === route.arg;
  app.route = route;
  markNav();
  if (same && !force && app.page.update) {
    app.page.update(route);
    return;
  }
  if (app.page) {
    try { app.page.destroy(); } catch (e) { console.warn(e); }
    app.page = null;
  }
  main.replaceChildren();
  main.dataset.page = route.name;
  const page = PAGES[route.name];
  document.title = (page ? t('nav.' + (page.arg ? route.name : page.nav)) : t('notfound')) + ' · gpuq';
  // Pages of one job or sweep take its numeric id, nothing else (it becomes an API path).
  if (!page || (page.arg && !/^\d{1,18}$/.test(route.arg ?? ''))) {
    main.append(h('div', { class: 'empty-page' }, h('h1', null, t('notfound')), h('p', null, h('a', { href: '#/queue' }, t('nav.queue')))));
    return;
  }
  try {
    app.page = page.mount(main, route, app);
  } catch (e) {
    console.error(e);
    main.append(h('p', { class: 'error-box' }, String(e && e.message)));
  }
  window.scrollTo(0, 0);
}

async function checkDrained() {
  try { drained.hidden = !(await get('/v1/queue')).drained; } catch (e) { /* shown elsewhere */ }
}

async function start() {
  document.documentElement.lang = lang();
  try {
    await loadSession();
  } catch (e) {
    if (e.status !== 401) {
      clear(main, h('p', { class: 'error-box' }, e.message));
    }
    return;
  }
  // The session ends at expires_at: check then (a 401 goes to /login).
  const left = Number(session.expires_at) - Date.now();
  if (Number.isFinite(left) && left > 0) setTimeout(() => loadSession().catch(() => {}), Math.min(left + 1000, 2 ** 31 - 1));
  renderHeader();
  window.addEventListener('hashchange', () => render(false));
  window.addEventListener('unhandledrejection', (ev) => { ev.preventDefault(); showError(ev.reason); });
  onFeed((type, item) => {
    if (app.page && app.page.feed) app.page.feed(type, item);
    if (type === 'job' && /drain/.test(item.kind || '')) checkDrained();
  });
  startFeed(status);
  checkDrained();
  setInterval(checkDrained, 60000);
  render(true);
}

start().catch((e) => toast(String(e && e.message ? e.message : e)));
