// #/queue: the jobs, newest first, filtered and paged by the server.
import { h, clear, table, stateBadge, jobLink, runtimeEl, money, text, tick, debounce, showError, DASH } from './dom.js';
import { getPage, get, qs, session } from './api.js';
import { actionButtons } from './actions.js';
import { t } from './i18n.js';
import { reasonText } from './reasons.js';

export const STATES = ['queued', 'running', 'succeeded', 'failed', 'cancelled', 'preempted', 'lost'];
const LIMIT = 100;

export function mount(root, route, app) {
  let params = route.params;
  let stack = []; // `before` of the pages newer than this one (null: the first page)
  let jobs = [];
  let total = null;
  let explain = new Map();
  let loading = 0;

  const userIn = h('input', { id: 'f-user', type: 'search', list: 'f-users', placeholder: t('queue.anyUser'), autocomplete: 'off', 'aria-label': t('col.user') });
  const projIn = h('input', { id: 'f-project', type: 'search', list: 'f-projects', placeholder: t('queue.anyProject'), autocomplete: 'off', 'aria-label': t('col.project') });
  const users = h('datalist', { id: 'f-users' });
  const projects = h('datalist', { id: 'f-projects' });
  const stateBoxes = STATES.map((s) => h('label', { class: 'chip state-chip state-' + s },
    h('input', { type: 'checkbox', value: s, dataset: { filterState: s } }), t('state.' + s)));
  const mine = h('button', { type: 'button', class: 'btn btn-small', id: 'f-mine' }, t('queue.mine'));
  const reset = h('button', { type: 'button', class: 'btn btn-small btn-ghost', id: 'f-clear' }, t('queue.clear'));
  const summary = h('span', { class: 'muted', id: 'queue-count' });
  const newer = h('button', { type: 'button', class: 'btn btn-small', id: 'page-newer' }, '← ' + t('queue.newer'));
  const older = h('button', { type: 'button', class: 'btn btn-small', id: 'page-older' }, t('queue.older') + ' →');
  const tableBox = h('div', { id: 'queue-table' });

  clear(root,
    h('div', { class: 'page-head' }, h('h1', null, t('nav.queue')), summary),
    h('div', { class: 'filters', id: 'queue-filters' },
      h('div', { class: 'filter-group' }, h('span', { class: 'filter-label' }, t('col.state')), stateBoxes),
      h('div', { class: 'filter-group' },
        h('label', { class: 'field' }, h('span', { class: 'filter-label' }, t('col.user')), userIn),
        h('label', { class: 'field' }, h('span', { class: 'filter-label' }, t('col.project')), projIn),
        mine, reset),
      users, projects),
    tableBox,
    h('div', { class: 'pager' }, newer, h('span', { class: 'muted', id: 'page-info' }), older));

  function current() {
    return {
      state: params.get('state') || '',
      user: params.get('user') || '',
      project: params.get('project') || '',
      before: params.get('before') || '',
    };
  }

  function showFilters() {
    const f = current();
    const on = new Set(f.state.split(',').filter(Boolean));
    for (const b of stateBoxes) {
      const box = b.querySelector('input');
      box.checked = on.has(box.value);
      b.classList.toggle('on', box.checked);
    }
    if (document.activeElement !== userIn) userIn.value = f.user;
    if (document.activeElement !== projIn) projIn.value = f.project;
    mine.classList.toggle('on', f.user === session.user);
  }

  // Filters live in the hash: a reload keeps them. A new filter starts at the first page.
  function go(change, keepPage) {
    const f = { ...current(), ...change };
    if (!keepPage) { f.before = ''; stack = []; }
    const q = qs(f);
    app.navigate('#/queue' + q);
  }

  for (const b of stateBoxes) {
    b.querySelector('input').addEventListener('change', () => {
      const on = stateBoxes.map((x) => x.querySelector('input')).filter((x) => x.checked).map((x) => x.value);
      go({ state: on.join(',') });
    });
  }
  const typed = debounce(() => go({ user: userIn.value.trim(), project: projIn.value.trim() }), 500);
  userIn.addEventListener('input', typed);
  projIn.addEventListener('input', typed);
  for (const el of [userIn, projIn]) {
    el.addEventListener('change', () => { typed.cancel(); go({ user: userIn.value.trim(), project: projIn.value.trim() }); });
  }
  mine.addEventListener('click', () => go({ user: current().user === session.user ? '' : session.user }));
  reset.addEventListener('click', () => go({ state: '', user: '', project: '' }));
  older.addEventListener('click', () => {
    if (!jobs.length) return;
    stack.push(current().before || null);
    go({ before: String(jobs[jobs.length - 1].id) }, true);
  });
  newer.addEventListener('click', () => {
    const prev = stack.length ? stack.pop() : null;
    go({ before: prev || '' }, true);
  });

  async function load() {
    const mine = ++loading;
    const f = current();
    try {
      const { data, headers } = await getPage('/v1/jobs' + qs({ ...f, limit: LIMIT }));
      if (mine !== loading) return;
      jobs = data;
      const tc = headers.get('x-total-count');
      total = tc == null || tc === '' ? null : Number(tc);
      const queued = jobs.filter((j) => j.state === 'queued').map((j) => j.id);
      if (queued.length) {
        try {
          // Only this page's jobs: the whole queue may be thousands.
          const ex = await get('/v1/explain' + qs({ ids: queued.join(',') }));
          explain = new Map(ex.map((e) => [e.id, e.explanation]));
        } catch (e) { explain = new Map(); }
      }
      if (mine !== loading) return;
      render();
    } catch (e) {
      if (mine === loading) {
        clear(tableBox, h('p', { class: 'error-box' }, e.message));
        showError(e);
      }
    }
  }

  async function loadNames() {
    try {
      const u = await get('/v1/usage');
      clear(users, u.users.map((x) => h('option', { value: x.user })));
      clear(projects, u.projects.map((x) => h('option', { value: x.project })));
    } catch (e) { /* only suggestions */ }
  }

  function gpusCell(j) {
    const n = j.gpus_requested;
    const idx = j.gpus && j.gpus.length ? j.gpus.join(',') : '';
    return h('td', { class: 'num' }, String(n), idx ? h('span', { class: 'muted small' }, ' [' + idx + ']') : null);
  }

  function reason(j) {
    if (j.state === 'queued') {
      const why = explain.get(j.id);
      if (why) return why;
      if (j.held_by) return t('queue.heldBy', { who: j.held_by });
    }
    return j.reason || '';
  }

  function row(j) {
    const why = reason(j);
    const idCell = h('td', { class: 'num id' }, jobLink(j.id),
      j.array_id != null && j.array_index != null ? h('span', { class: 'muted small' }, ' ' + j.array_id + '.' + j.array_index) : null);
    const held = j.state === 'queued' && j.held_by ? h('span', { class: 'tag' }, t('queue.held')) : null;
    return h('tr', { dataset: { jobId: j.id, state: j.state, user: j.user } },
      idCell,
      h('td', { class: 'name' }, h('a', { href: '#/job/' + encodeURIComponent(j.id) }, text(j.name))),
      h('td', { class: 'state' }, stateBadge(j.state), held ? ' ' : null, held),
      h('td', null, j.user),
      h('td', null, text(j.project)),
      gpusCell(j),
      h('td', { class: 'num' }, runtimeEl(j.started_at, j.ended_at)),
      h('td', { class: 'reason', title: why || null }, reasonText(why) || DASH),
      h('td', { class: 'num' }, money(j.cost)),
      h('td', { class: 'actions' }, actionButtons(j, load)));
  }

  function render() {
    showFilters();
    const f = current();
    const filtered = f.state || f.user || f.project;
    clear(tableBox, table('jobs', [
      { label: t('col.id'), class: 'num' }, t('col.name'), t('col.state'), t('col.user'), t('col.project'),
      { label: t('col.gpus'), class: 'num' }, { label: t('col.runtime'), class: 'num' }, t('col.reason'),
      { label: t('col.cost'), class: 'num' }, { label: '', class: 'actions' },
    ], jobs.map(row), filtered ? t('queue.noneMatch') : t('queue.none')));
    const page = stack.length;
    const known = f.before === '' || stack.length > 0;
    summary.textContent = total == null ? '' : t('queue.total', { n: total });
    const info = document.getElementById('page-info');
    if (jobs.length === 0) info.textContent = '';
    else if (known && total != null) {
      const from = page * LIMIT + 1;
      info.textContent = t('queue.range', { from, to: from + jobs.length - 1, total });
    } else info.textContent = t('queue.pageOf', { n: jobs.length });
    newer.disabled = f.before === '';
    older.disabled = jobs.length < LIMIT || (known && total != null && page * LIMIT + jobs.length >= total);
  }

  const refresh = debounce(load, 250);
  const ticker = setInterval(() => tick(tableBox), 1000);
  const poll = setInterval(load, 15000);
  showFilters();
  load();
  loadNames();

  return {
    update(r) { params = r.params; showFilters(); load(); },
    feed(type) { if (type === 'job') refresh(); },
    destroy() { clearInterval(ticker); clearInterval(poll); refresh.cancel(); typed.cancel(); },
  };
}
