// #/experiments/E/runs/R: where the MLflow client's "View run" link lands.
// A job's run (its id is the job's) opens the job's page, a sweep's parent run
// (sweep-N) the sweep's; a run that is no job's (made by the client outside
// gpuq) is shown here: its params, latest metrics and tags.
import { h, clear, table, dl, card, text, timeEl, showError, DASH } from './dom.js';
import { get, qs } from './api.js';
import { t } from './i18n.js';

// The dashboard route of a run id, when it has one of its own.
export function routeOfRun(runId) {
  if (/^\d{1,18}$/.test(runId)) return '#/job/' + runId;
  const sweep = /^sweep-(\d{1,18})$/.exec(runId);
  return sweep ? '#/sweep/' + sweep[1] : null;
}

export function mount(root, route, app) {
  const [, experiment, what, runId] = route.parts;
  const body = h('div', { id: 'run-page' }, h('p', { class: 'muted' }, t('loading')));
  clear(root, h('div', { class: 'page-head' }, h('h1', null, t('run.title', { id: runId ?? DASH }))), body);
  if (what !== 'runs' || !runId) {
    // "View experiment": no page of its own; its runs are jobs in the queue.
    clear(body, h('p', null, t('run.experimentOnly', { id: experiment ?? DASH })), h('p', null, h('a', { href: '#/queue' }, t('nav.queue'))));
    return { destroy() {} };
  }
  const own = routeOfRun(runId);
  if (own) {
    location.replace(own);
    return { destroy() {} };
  }
  let destroyed = false;
  (async () => {
    try {
      const { run } = await get('/api/2.0/mlflow/runs/get' + qs({ run_id: runId }));
      if (destroyed) return;
      const tags = Object.fromEntries((run.data.tags || []).map((x) => [x.key, x.value]));
      const job = tags['gpuq.job_id'];
      if (job && /^\d{1,18}$/.test(job)) {
        location.replace('#/job/' + job);
        return;
      }
      const info = run.info;
      const rows = (list, cells) => (list || []).map((x) => h('tr', null, cells(x).map((c) => h('td', null, c))));
      clear(body,
        card(t('run.info'), dl([
          [t('run.name'), text(info.run_name)],
          [t('run.experiment'), text(info.experiment_id)],
          [t('col.state'), text(info.status)],
          [t('job.started'), timeEl(info.start_time)],
          [t('job.ended'), info.end_time ? timeEl(info.end_time) : DASH],
        ], 'facts-grid')),
        card(t('job.params'), table('run-params', [t('run.key'), t('run.value')], rows(run.data.params, (p) => [text(p.key), text(p.value)]), DASH)),
        card(t('run.metrics'), table('run-metrics', [t('run.key'), t('run.value'), t('run.step')],
          rows(run.data.metrics, (m) => [text(m.key), text(String(m.value)), text(String(m.step ?? DASH))]), DASH)),
        card(t('run.tags'), table('run-tags', [t('run.key'), t('run.value')],
          rows((run.data.tags || []).filter((x) => !x.key.startsWith('mlflow.')), (x) => [text(x.key), text(x.value)]), DASH)));
    } catch (e) {
      if (!destroyed) { clear(body, h('p', { class: 'error-box' }, e.message)); showError(e); }
    }
  })();
  return { destroy() { destroyed = true; } };
}
