// #/cost: what was spent this month (or a chosen month), by user, by project
// and by day, and the budgets.
import { h, clear, card, dl, table, money, hours, num, pct, timeEl, showError, DASH } from './dom.js';
import { get, qs } from './api.js';
import { chart, destroyAll } from './charts.js';
import { t } from './i18n.js';

// What the charts measure: dollars once anything has a price, else GPU-hours.
const unit = (priced) => (priced ? t('cost.unit.usd') : t('cost.unit.gpuHours'));

// GPU-hours on an axis: enough digits that small figures stay apart.
const hourTicks = (v) => num(v, Math.abs(v) < 0.1 ? 3 : Math.abs(v) < 10 ? 2 : 1);

export function mount(root, route, app) {
  const month = /^\d{4}-\d{2}$/.test(route.params.get('month') || '') ? route.params.get('month') : '';
  const charts = [];
  let destroyed = false;

  const now = new Date();
  const thisOne = now.getFullYear() + '-' + String(now.getMonth() + 1).padStart(2, '0');
  const picker = h('input', { type: 'month', id: 'cost-month', value: month || thisOne, max: thisOne, 'aria-label': t('cost.month') });
  picker.addEventListener('change', () => app.navigate('#/cost' + qs({ month: picker.value === thisOne ? '' : picker.value })));
  const thisMonth = h('button', { type: 'button', class: 'btn btn-small', id: 'cost-current', disabled: !month,
    onclick: () => app.navigate('#/cost') }, t('cost.current'));
  const summary = h('div', { id: 'cost-summary' }, h('p', { class: 'muted' }, t('loading')));
  const budgets = h('div', { id: 'cost-budgets' });
  const byDay = h('div', { id: 'cost-by-day' });
  const byUser = h('div', { id: 'cost-by-user' });
  const byProject = h('div', { id: 'cost-by-project' });
  const byUserTime = h('div', { id: 'cost-by-user-time' });
  const byProjectTime = h('div', { id: 'cost-by-project-time' });
  clear(root,
    h('div', { class: 'page-head' }, h('h1', null, t('nav.cost')),
      h('div', { class: 'toolbar' }, h('label', { class: 'field inline' }, h('span', null, t('cost.month')), picker), thisMonth)),
    summary,
    card(t('cost.budgets'), budgets),
    card(t('cost.byDay'), byDay),
    h('div', { class: 'two-col' }, card(t('cost.byUser'), byUser), card(t('cost.byProject'), byProject)),
    h('div', { class: 'two-col' }, card(t('cost.byUserTime'), byUserTime), card(t('cost.byProjectTime'), byProjectTime)));

  const span = month ? { month } : {};

  function groupTable(rep, id) {
    const priced = rep.rows.some((r) => r.cost != null);
    const val = (r) => (priced ? r.cost ?? 0 : r.gpu_hours);
    const top = Math.max(0, ...rep.rows.map(val));
    const unpriced = rep.rows.some((r) => r.unpriced_hours > 0);
    const rows = [...rep.rows].sort((a, b) => val(b) - val(a)).map((r) => {
      const fill = h('span', { class: 'hbar-fill' });
      fill.style.width = (top > 0 ? (val(r) * 100) / top : 0) + '%';
      return h('tr', { dataset: { key: r.key } },
        h('td', { class: 'name' }, r.key === '-' ? h('span', { class: 'muted' }, t('cost.none')) : r.key),
        h('td', { class: 'bar-cell' }, h('span', { class: 'hbar' }, fill)),
        h('td', { class: 'num' }, money(r.cost)),
        h('td', { class: 'num' }, hours(r.gpu_hours)),
        h('td', { class: 'num' }, hours(r.used_gpu_hours)),
        h('td', { class: 'num' }, String(r.attempts)),
        unpriced ? h('td', { class: 'num' }, r.unpriced_hours ? hours(r.unpriced_hours) : DASH) : null);
    });
    return h('div', { id }, table('cost', [
      rep.by === 'user' ? t('col.user') : t('col.project'), { label: '', class: 'bar-cell' }, { label: t('col.cost'), class: 'num' },
      { label: t('cost.gpuHours'), class: 'num' }, { label: t('cost.usedHours'), class: 'num' }, { label: t('cost.attempts'), class: 'num' },
      unpriced ? { label: t('cost.unpriced'), class: 'num' } : null,
    ].filter(Boolean), rows, t('cost.nothing')));
  }

  function renderBudgets(list) {
    if (!list.length) { clear(budgets, h('p', { class: 'muted' }, t('cost.noBudgets'))); return; }
    clear(budgets, h('div', { class: 'budgets' }, list.map((b) => {
      const fill = h('span', { class: 'progress-fill' });
      fill.style.width = Math.min(100, Math.max(0, b.percent)) + '%';
      const level = b.exhausted || b.percent >= 100 ? 'over' : b.percent >= 80 ? 'warn' : 'ok';
      return h('div', { class: 'budget ' + level, dataset: { scope: b.scope, name: b.name, exhausted: b.exhausted } },
        h('div', { class: 'budget-head' },
          h('span', { class: 'budget-name' }, h('span', { class: 'tag' }, t('cost.scope.' + b.scope, null, b.scope)), ' ', b.name),
          h('span', { class: 'muted small' }, t('cost.period.' + b.period, null, b.period) + ' · ' + t('cost.action.' + b.action, null, b.action))),
        h('div', { class: 'progress', role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': String(Math.round(b.percent)) }, fill),
        h('div', { class: 'budget-figures small' },
          h('span', null, money(b.spent) + ' / ' + money(b.limit) + ' · ' + pct(b.percent, 1)),
          h('span', { class: 'muted' }, t('cost.left', { left: money(b.left) }), ' · ', t('cost.until'), ' ', timeEl(b.period_end))));
    })));
  }

  function renderDay(rep) {
    destroyAll(charts);
    const priced = rep.rows.some((r) => r.cost != null);
    // Days are the server's (its cost.timezone); every day of the window gets a bar.
    const byKey = new Map(rep.rows.map((r) => [r.key, priced ? (r.cost ?? 0) / 1e6 : r.gpu_hours]));
    if (!byKey.size) { clear(byDay, h('p', { class: 'muted' }, t('cost.nothing'))); return; }
    const dayOf = (ms) => { const d = new Date(ms); return Date.UTC(d.getFullYear(), d.getMonth(), d.getDate()); };
    const keyOf = (utc) => new Date(utc).toISOString().slice(0, 10);
    const parse = (k) => { const [y, m, d] = k.split('-').map(Number); return Date.UTC(y, m - 1, d); };
    const keys = [...byKey.keys()].map(parse).filter(Number.isFinite);
    const first = Math.min(dayOf(rep.since), ...keys);
    // The whole month of the window's start: the days to come show as empty.
    const f = new Date(first);
    const monthEnd = Date.UTC(f.getUTCFullYear(), f.getUTCMonth() + 1, 0);
    const last = Math.max(dayOf(rep.until - 1), monthEnd, ...keys);
    const rows = [];
    for (let d = first; d <= last && rows.length < 400; d += 86400000) {
      const [y, m, dd] = keyOf(d).split('-').map(Number);
      rows.push({ x: new Date(y, m - 1, dd).getTime() / 1000, v: byKey.get(keyOf(d)) ?? 0 });
    }
    const box = h('div', { class: 'chart-box', id: 'cost-day-chart' });
    clear(byDay, box);
    charts.push(chart(box, {
      time: true, bars: true, height: 220, xRange: [rows[0].x - 43200, rows[rows.length - 1].x + 43200],
      series: [{ label: unit(priced), color: '#2563eb', fmt: priced ? (v) => '$' + num(v, 2) : (v) => num(v, 2) }],
      data: [rows.map((r) => r.x), rows.map((r) => r.v)],
      yRange: (u, lo, hi) => [0, (hi || 1) * 1.15],
      axes: { y: { label: unit(priced), fmt: priced ? (v) => '$' + num(v, v < 10 ? 2 : 0) : hourTicks } },
    }));
  }

  // One line per user (or project) over the window's days: the biggest few
  // by name, the rest summed as "others".
  function renderOverTime(rep, box, id) {
    const priced = rep.rows.some((r) => r.cost != null);
    const val = (r) => (priced ? (r.cost ?? 0) / 1e6 : r.gpu_hours);
    const perName = new Map();
    const days = new Set();
    for (const r of rep.rows) {
      const cut = r.key.indexOf('/');
      if (cut < 0) continue;
      const day = r.key.slice(0, cut), name = r.key.slice(cut + 1);
      days.add(day);
      if (!perName.has(name)) perName.set(name, new Map());
      perName.get(name).set(day, (perName.get(name).get(day) || 0) + val(r));
    }
    if (!perName.size) { clear(box, h('p', { class: 'muted' }, t('cost.nothing'))); return; }
    const total = (m) => [...m.values()].reduce((a, b) => a + b, 0);
    const names = [...perName.keys()].sort((a, b) => total(perName.get(b)) - total(perName.get(a)));
    const shown = names.slice(0, 7);
    const rest = names.slice(7);
    const sorted = [...days].sort();
    const xs = sorted.map((d) => { const [y, m, dd] = d.split('-').map(Number); return new Date(y, m - 1, dd).getTime() / 1000; });
    const lines = shown.map((n) => sorted.map((d) => perName.get(n).get(d) ?? 0));
    if (rest.length) lines.push(sorted.map((d) => rest.reduce((a, n) => a + (perName.get(n).get(d) ?? 0), 0)));
    const labels = shown.map((n) => (n === '-' ? t('cost.none') : n)).concat(rest.length ? [t('cost.others')] : []);
    const el = h('div', { class: 'chart-box', id });
    clear(box, el);
    const fmt = priced ? (v) => '$' + num(v, 2) : (v) => num(v, 2);
    charts.push(chart(el, {
      time: true, height: 200, xRange: xs.length > 1 ? [xs[0], xs[xs.length - 1]] : [xs[0] - 43200, xs[0] + 43200],
      series: labels.map((label) => ({ label, fmt, points: xs.length < 40, line: true, width: 2 })),
      data: [xs, ...lines],
      yRange: (u, lo, hi) => [0, (hi || 1) * 1.15],
      axes: { y: { label: unit(priced), fmt: priced ? (v) => '$' + num(v, v < 10 ? 2 : 0) : hourTicks } },
    }));
  }

  async function load() {
    let user, project, day, userDays, projectDays;
    try {
      [user, project, day, userDays, projectDays] = await Promise.all(
        ['user', 'project', 'day', 'user,day', 'project,day'].map((by) => get('/v1/cost' + qs({ by, ...span }))));
    } catch (e) {
      if (!destroyed) { clear(summary, h('p', { class: 'error-box' }, e.message)); showError(e); }
      return;
    }
    if (destroyed) return;
    clear(summary, card(null, dl([
      [t('cost.window'), user.window],
      [t('cost.total'), h('strong', { id: 'cost-total' }, money(user.total))],
      [t('cost.gpuHours'), hours(user.gpu_hours)],
      [t('cost.pricing'), user.pricing],
    ], 'facts-grid')));
    renderBudgets(user.budgets || []);
    renderDay(day);
    renderOverTime(userDays, byUserTime, 'cost-user-days');
    renderOverTime(projectDays, byProjectTime, 'cost-project-days');
    clear(byUser, groupTable(user, 'cost-users'));
    clear(byProject, groupTable(project, 'cost-projects'));
  }

  load();
  const timer = setInterval(() => { if (!month) load(); }, 60000);
  return { destroy() { destroyed = true; clearInterval(timer); destroyAll(charts); } };
}
