// #/alerts: the latest alerts, newest first; new ones arrive by the event stream.
import { h, clear, table, jobLink, timeEl, text, showError, DASH } from './dom.js';
import { get, qs } from './api.js';
import { t } from './i18n.js';

export const KINDS = ['job_idle', 'gpu_memory_high', 'gpu_temperature_high', 'gpu_xid', 'gpu_lost', 'job_failed', 'job_oom', 'budget', 'node_idle', 'session_idle', 'metrics_dropped'];
const SEVERE = new Set(['gpu_xid', 'gpu_lost', 'job_oom', 'job_failed']);

export function mount(root, route, app) {
  const kind = KINDS.includes(route.params.get('kind')) ? route.params.get('kind') : '';
  let alerts = [];
  let destroyed = false;
  const select = h('select', { id: 'alert-kind', 'aria-label': t('alerts.kind') },
    h('option', { value: '' }, t('alerts.all')),
    KINDS.map((k) => h('option', { value: k, selected: k === kind }, t('alert.' + k))));
  select.addEventListener('change', () => app.navigate('#/alerts' + qs({ kind: select.value })));
  const body = h('div', { id: 'alerts-table' }, h('p', { class: 'muted' }, t('loading')));
  const count = h('span', { class: 'muted', id: 'alerts-count' });
  clear(root, h('div', { class: 'page-head' }, h('h1', null, t('nav.alerts')), count,
    h('div', { class: 'toolbar' }, h('label', { class: 'field inline' }, h('span', null, t('alerts.kind')), select))), body);

  function row(a, fresh) {
    return h('tr', { dataset: { alertId: a.id, kind: a.kind }, class: fresh ? 'fresh' : null },
      h('td', null, timeEl(a.at)),
      h('td', null, h('span', { class: 'badge ' + (SEVERE.has(a.kind) ? 'bad' : 'warn') }, t('alert.' + a.kind, null, a.kind))),
      h('td', { class: 'num' }, a.job != null ? jobLink(a.job) : DASH),
      h('td', null, text(a.user)),
      h('td', { class: 'num' }, a.gpu != null ? String(a.gpu) : DASH),
      h('td', { class: 'message' }, a.message));
  }

  function render(freshId) {
    const shown = kind ? alerts.filter((a) => a.kind === kind) : alerts;
    count.textContent = t('alerts.count', { n: shown.length });
    clear(body, table('alerts', [t('col.time'), t('alerts.kind'), { label: t('col.job'), class: 'num' }, t('col.user'),
      { label: 'GPU', class: 'num' }, t('alerts.message')], shown.map((a) => row(a, a.id === freshId)), t('alerts.none')));
  }

  async function load() {
    try {
      alerts = await get('/v1/alerts?limit=500');
      if (!destroyed) render();
    } catch (e) {
      if (!destroyed) { clear(body, h('p', { class: 'error-box' }, e.message)); showError(e); }
    }
  }
  load();
  return {
    feed(type, item) {
      if (type !== 'alert' || alerts.some((a) => a.id === item.id)) return;
      const { type: _, ...a } = item;
      alerts.unshift(a);
      alerts.sort((x, y) => y.id - x.id);
      render(a.id);
    },
    destroy() { destroyed = true; },
  };
}
