// #/sweeps and #/sweep/ID: hyperparameter sweeps, their trials, the best so
// far, each parameter against the metric, and the rungs.
import { h, clear, card, dl, table, jobLink, timeEl, hours, dollars, num, text, debounce, showError, sweepHref, DASH } from './dom.js';
import { get, getRaw } from './api.js';
import { chart, destroyAll, clean } from './charts.js';
import { fmtValue } from './job.js';
import { t } from './i18n.js';

const SWEEP_STATE = { running: 'running', done: 'succeeded', cancelled: 'cancelled', budget: 'preempted' };
const TRIAL_STATE = { queued: 'queued', running: 'running', paused: 'preempted', completed: 'succeeded', failed: 'failed', stopped: 'cancelled', cancelled: 'cancelled' };

function sweepBadge(state) {
  return h('span', { class: 'badge state-' + (SWEEP_STATE[state] || 'lost'), dataset: { stateBadge: state } }, t('sweep.state.' + state, null, state));
}
function trialBadge(state) {
  return h('span', { class: 'badge state-' + (TRIAL_STATE[state] || 'lost'), dataset: { stateBadge: state } }, t('trial.state.' + state, null, state));
}
const metricText = (m) => m.name + ' ' + (m.goal === 'maximize' ? '↑' : '↓');
const valueText = (v) => (v == null ? DASH : typeof v === 'number' ? fmtValue(v) : String(v));

function budgetText(s) {
  const b = s.budget;
  const used = s.used || {};
  if (!b) return hours(used.gpu_hours) + ' ' + t('unit.gpuh');
  if (b.gpu_hours != null) return hours(used.gpu_hours) + ' / ' + hours(b.gpu_hours) + ' ' + t('unit.gpuh');
  if (b.dollars != null) return dollars(used.dollars) + ' / ' + dollars(b.dollars);
  return DASH;
}

export function mountList(root, route, app) {
  const body = h('div', { id: 'sweeps-table' }, h('p', { class: 'muted' }, t('loading')));
  clear(root, h('div', { class: 'page-head' }, h('h1', null, t('nav.sweeps'))), body);
  let destroyed = false;

  async function load() {
    let list;
    try { list = await get('/v1/sweeps'); } catch (e) { if (!destroyed) showError(e); return; }
    if (destroyed) return;
    list.sort((a, b) => b.id - a.id);
    clear(body, table('sweeps', [
      { label: t('col.id'), class: 'num' }, t('col.name'), t('col.state'), t('col.user'), t('sweep.searcher'), t('sweep.metric'),
      t('sweep.best'), { label: t('sweep.trials'), class: 'num' }, t('sweep.budget'), t('sweep.created'),
    ], list.map((s) => h('tr', { dataset: { sweepId: s.id, state: s.state } },
      h('td', { class: 'num' }, h('a', { href: sweepHref(s.id) }, String(s.id))),
      h('td', { class: 'name' }, h('a', { href: sweepHref(s.id) }, s.name)),
      h('td', null, sweepBadge(s.state)),
      h('td', null, s.user),
      h('td', null, s.searcher),
      h('td', null, metricText(s.metric)),
      h('td', null, s.best ? [valueText(s.best.value), h('span', { class: 'muted small' }, ' @' + s.best.step + ' · '), jobLink(s.best.job, t('sweep.trialN', { n: s.best.trial }))] : DASH),
      h('td', { class: 'num' }, s.trial_count + ' / ' + s.max_trials, s.active ? h('span', { class: 'muted small' }, ' · ' + t('sweep.activeN', { n: s.active })) : null),
      h('td', null, budgetText(s)),
      h('td', null, timeEl(s.created_at)),
    )), t('sweep.none')));
  }
  const later = debounce(load, 1000);
  const timer = setInterval(load, 10000);
  load();
  return {
    feed(type) { if (type === 'job') later(); },
    destroy() { destroyed = true; clearInterval(timer); later.cancel(); },
  };
}

export function mountDetail(root, route, app) {
  const id = route.arg;
  const charts = [];
  let destroyed = false;
  let detail = null;
  let jobs = new Set();
  const head = h('div', { class: 'page-head' }, h('h1', null, t('sweep.title', { id })));
  const facts = h('div', { id: 'sweep-facts' });
  const chartsBox = h('div', { id: 'sweep-charts' });
  const trials = h('div', { id: 'sweep-trials' });
  const rungs = h('div', { id: 'sweep-rungs' });
  clear(root, head, facts, card(t('sweep.charts'), chartsBox), card(t('sweep.trials'), trials), card(t('sweep.rungs'), rungs));

  function paramText(v) {
    return typeof v === 'number' ? fmtValue(v) : typeof v === 'string' ? v : JSON.stringify(v);
  }

  function renderFacts(d) {
    clear(head, h('h1', null, t('sweep.title', { id: d.id }), h('span', { class: 'title-name' }, ' ' + d.name)), sweepBadge(d.state));
    clear(facts, card(null, dl([
      [t('col.user'), d.user],
      [t('col.project'), text(d.project)],
      [t('sweep.searcher'), d.searcher],
      [t('sweep.metric'), metricText(d.metric)],
      [t('sweep.best'), d.best ? [valueText(d.best.value), ' @' + d.best.step + ' · ', jobLink(d.best.job, t('sweep.trialN', { n: d.best.trial }))] : DASH],
      [t('sweep.trials'), d.trial_count + ' / ' + d.max_trials + ' · ' + t('sweep.activeN', { n: d.active }) + ' · ' + t('sweep.concurrent', { n: d.max_concurrent })],
      [t('sweep.budget'), budgetText(d)],
      [t('sweep.seed'), String(d.seed)],
      [t('sweep.created'), timeEl(d.created_at)],
      [t('job.ended'), timeEl(d.ended_at)],
      [t('col.reason'), text(d.reason)],
      [t('sweep.run'), h('code', null, d.run_id)],
    ], 'facts-grid')));
  }

  function renderTrials(d) {
    const keys = [...new Set(d.trials.flatMap((x) => Object.keys(x.params)))].sort();
    clear(trials, table('trials', [
      { label: t('sweep.trial'), class: 'num' }, t('sweep.job'), t('col.state'), ...keys.map((k) => ({ label: k, class: 'num param' })),
      { label: t('sweep.rung'), class: 'num' }, { label: d.metric.name, class: 'num' }, { label: t('sweep.attempts'), class: 'num' },
      { label: t('unit.gpuh'), class: 'num' }, { label: t('col.cost'), class: 'num' }, t('col.reason'),
    ], d.trials.map((x) => h('tr', { dataset: { trial: x.trial, jobId: x.job, state: x.state } },
      h('td', { class: 'num' }, String(x.trial)),
      h('td', null, jobLink(x.job)),
      h('td', null, trialBadge(x.state)),
      keys.map((k) => h('td', { class: 'num param' }, k in x.params ? paramText(x.params[k]) : DASH)),
      h('td', { class: 'num' }, String(x.rung), h('span', { class: 'muted small' }, ' · ' + t('sweep.stepN', { n: x.rung_step }))),
      h('td', { class: 'num' }, valueText(x.last_value), x.last_step != null ? h('span', { class: 'muted small' }, ' @' + x.last_step) : null),
      h('td', { class: 'num' }, String(x.attempts)),
      h('td', { class: 'num' }, hours(x.gpu_hours)),
      h('td', { class: 'num' }, x.cost != null ? dollars(x.cost) : DASH),
      h('td', { class: 'reason', title: x.reason || null }, text(x.reason)),
    )), t('sweep.noTrials')));
  }

  function renderRungs(d) {
    clear(rungs, table('rungs', [
      { label: t('sweep.rung'), class: 'num' }, { label: t('sweep.step'), class: 'num' },
      { label: t('sweep.reached'), class: 'num' }, { label: t('sweep.here'), class: 'num' }, { label: t('sweep.bestHere'), class: 'num' },
    ], d.rungs.map((step, i) => {
      const reached = d.trials.filter((x) => x.rung >= i);
      const here = d.trials.filter((x) => x.rung === i);
      const vals = here.filter((x) => x.last_step != null && x.last_step >= step).map((x) => clean(x.last_value)).filter((v) => v != null);
      const best = vals.length ? (d.metric.goal === 'maximize' ? Math.max(...vals) : Math.min(...vals)) : null;
      return h('tr', { dataset: { rung: i } },
        h('td', { class: 'num' }, String(i)), h('td', { class: 'num' }, String(step)),
        h('td', { class: 'num' }, String(reached.length)), h('td', { class: 'num' }, String(here.length)),
        h('td', { class: 'num' }, valueText(best)));
    }), DASH));
  }

  function renderCharts(d) {
    destroyAll(charts);
    const max = d.metric.goal === 'maximize';
    const done = [...d.trials].sort((a, b) => a.trial - b.trial);
    const ys = done.map((x) => clean(x.last_value));
    const cards = [];
    // Best so far over time (when each trial's value was logged), or in the
    // order trials were started where the times are not known.
    const timed = done.filter((x) => clean(x.last_value) != null);
    const overTime = timed.length > 0 && timed.every((x) => x.last_at != null);
    const order = overTime ? [...timed].sort((a, b) => a.last_at - b.last_at) : done;
    const ordered = order.map((x) => clean(x.last_value));
    let best = null;
    const bestSeries = ordered.map((v) => { if (v != null && (best == null || (max ? v > best : v < best))) best = v; return best; });
    if (ys.some((v) => v != null)) {
      const series = [{ label: d.metric.name, points: true, color: '#94a3b8' }, { label: t('sweep.best'), color: '#059669', width: 2, spanGaps: true }];
      cards.push([t('sweep.bestSoFar'), overTime
        ? { height: 200, time: true, series, data: [order.map((x) => x.last_at / 1000), ordered, bestSeries] }
        : {
          height: 200, xLabel: t('sweep.trial'), series,
          data: [order.map((x) => x.trial), ordered, bestSeries],
          axes: { x: { label: t('sweep.trial'), incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] } },
        }, 'wide']);
    }
    // One scatter per parameter against the metric.
    const keys = [...new Set(d.trials.flatMap((x) => Object.keys(x.params)))].sort();
    for (const k of keys) {
      const rows = d.trials.filter((x) => k in x.params && clean(x.last_value) != null);
      if (!rows.length) continue;
      const numeric = rows.every((x) => typeof x.params[k] === 'number');
      let xs, values, catAxis, catRange, xLog = false;
      if (numeric) {
        const pv = rows.map((x) => x.params[k]);
        const lo = Math.min(...pv), hi = Math.max(...pv);
        xLog = lo > 0 && hi / lo >= 50; // loguniform spaces span decades
        const order = rows.map((x, i) => i).sort((a, b) => pv[a] - pv[b]);
        xs = order.map((i) => pv[i]);
        values = order.map((i) => clean(rows[i].last_value));
      } else {
        const cats = [...new Set(rows.map((x) => paramText(x.params[k])))].sort();
        const order = rows.map((x, i) => i).sort((a, b) => cats.indexOf(paramText(rows[a].params[k])) - cats.indexOf(paramText(rows[b].params[k])));
        xs = order.map((i) => cats.indexOf(paramText(rows[i].params[k])));
        values = order.map((i) => clean(rows[i].last_value));
        catAxis = (u, splits) => splits.map((s) => (Number.isInteger(s) ? cats[s] ?? '' : ''));
        catRange = [-0.5, cats.length - 0.5];
      }
      cards.push([k + (xLog ? ' (log)' : ''), {
        height: 180, xLog, xLabel: k,
        series: [{ label: d.metric.name, points: true }],
        data: [xs, values],
        xRange: numeric ? undefined : catRange,
        axes: { x: { values: numeric ? undefined : catAxis, incrs: numeric ? undefined : [1, 2, 5, 10, 20, 50] } },
      }, 'scatter']);
    }
    if (!cards.length) { clear(chartsBox, h('p', { class: 'muted' }, t('sweep.noValues'))); return; }
    const grid = h('div', { class: 'chart-grid' });
    clear(chartsBox, grid);
    for (const [title, spec, cls] of cards) {
      const box = h('div', { class: 'chart-box' });
      grid.append(h('div', { class: 'chart ' + cls, dataset: { chart: title } }, h('h3', { class: 'chart-title' }, title), box));
      charts.push(chart(box, spec));
    }
  }

  async function load() {
    let d;
    try {
      const raw = await (await getRaw('/v1/sweeps/' + encodeURIComponent(id))).text();
      d = JSON.parse(raw);
      // The seed is a u64, past what a JS number holds exactly: show the digits sent.
      const seed = /"seed":(\d+),"rungs"/.exec(raw);
      if (seed) d.seed = seed[1];
    } catch (e) {
      if (destroyed) return;
      if (!detail) clear(facts, h('p', { class: 'error-box' }, e.message));
      showError(e);
      return;
    }
    if (destroyed) return;
    const same = detail && JSON.stringify(detail) === JSON.stringify(d);
    detail = d;
    if (same) return;
    document.title = t('sweep.title', { id: d.id }) + ' · gpuq';
    jobs = new Set(d.trials.map((x) => String(x.job)));
    renderFacts(d);
    renderTrials(d);
    renderRungs(d);
    renderCharts(d);
  }
  const later = debounce(load, 1000);
  const timer = setInterval(() => { if (!detail || detail.state === 'running') load(); }, 5000);
  load();
  return {
    feed(type, item) { if (type === 'job' && (jobs.has(String(item.job_id)) || item.kind === 'submitted')) later(); },
    destroy() { destroyed = true; clearInterval(timer); later.cancel(); destroyAll(charts); },
  };
}
