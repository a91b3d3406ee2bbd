// #/sessions: running notebooks and shells: whose, their GPUs, clients, and
// whether they are idle (and when the idle stop is due). A notebook of the
// logged-in user opens with a button to its `path`, /sessions/<id>/<capability>/lab:
// the API tells it to its user alone (this page asks with the CSRF secret).
import { h, clear, table, jobLink, timeEl, text, showError, DASH } from './dom.js';
import { get, session } from './api.js';
import { t } from './i18n.js';

const EVERY_MS = 3000;

function ago(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + 's';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm';
  return Math.floor(m / 60) + 'h' + String(m % 60).padStart(2, '0') + 'm';
}

export function mount(root) {
  let destroyed = false;
  let timer = null;
  const body = h('div', { id: 'sessions-table' }, h('p', { class: 'muted' }, t('loading')));
  clear(root, h('div', { class: 'page-head' }, h('h1', null, t('nav.sessions'))),
    h('p', { class: 'muted' }, t('sessions.help')), body);

  function state(s, now) {
    if (!s.ready) return h('span', { class: 'badge' }, t('sessions.starting'));
    if (s.idle_since != null) {
      const idle = t('sessions.idle', { span: ago(now - s.idle_since) });
      const stop = s.stop_at != null ? ' · ' + t('sessions.stops', { span: ago(s.stop_at - now) }) : '';
      return h('span', { class: 'badge warn', dataset: { idle: 'yes' } }, idle + stop);
    }
    // What keeps it in use: a notebook training with no tab open is busy by its GPU.
    const by = [];
    if (s.clients > 0) by.push(t('sessions.by_clients', { n: s.clients }));
    if (s.busy_kernels > 0) by.push(t('sessions.by_kernels', { n: s.busy_kernels }));
    if (s.gpu_busy_percent != null) by.push(t('sessions.by_gpu', { pct: Math.round(s.gpu_busy_percent) }));
    return h('span', { class: 'badge ok', dataset: { inUse: by.length ? 'yes' : 'recent' } },
      t('sessions.in_use') + (by.length ? t('sessions.by_sep') + by.join(t('sessions.by_join')) : ''));
  }

  function row(s, now, me) {
    const open = s.kind === 'notebook' && s.ready && s.user === me
      ? h('a', { class: 'button', href: s.path, target: '_blank', rel: 'noopener', dataset: { open: s.job } }, t('sessions.open'))
      : (s.kind === 'shell' && s.user === me ? h('code', null, 'gpuq shell --attach ' + s.job) : DASH);
    return h('tr', { dataset: { session: s.job, kind: s.kind } },
      h('td', { class: 'num' }, jobLink(s.job)),
      h('td', null, t('sessions.kind.' + s.kind, null, s.kind)),
      h('td', null, text(s.user)),
      // A count, as the queue shows it; the indices on hover.
      h('td', { class: 'num', title: s.gpus.length ? 'GPU ' + s.gpus.join(', ') : null }, s.gpus.length ? String(s.gpus.length) : DASH),
      h('td', { class: 'num' }, String(s.clients)),
      h('td', null, state(s, now)),
      h('td', null, s.idle_stop_ms != null ? ago(s.idle_stop_ms) : t('sessions.never')),
      h('td', null, open));
  }

  async function load() {
    try {
      const list = await get('/v1/sessions');
      if (destroyed) return;
      const now = Date.now();
      const me = session.user;
      clear(body, table('sessions', [{ label: t('col.job'), class: 'num' }, t('sessions.kind'), t('col.user'),
        { label: t('col.gpus'), class: 'num' }, { label: t('sessions.clients'), class: 'num' }, t('col.state'),
        t('sessions.idle_stop'), ''], list.map((s) => row(s, now, me)), t('sessions.none')));
    } catch (e) {
      if (!destroyed) { clear(body, h('p', { class: 'error-box' }, e.message)); showError(e); }
    }
    if (!destroyed) timer = setTimeout(load, EVERY_MS);
  }
  load();
  return { destroy() { destroyed = true; clearTimeout(timer); } };
}
