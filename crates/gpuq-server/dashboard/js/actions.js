// The actions on a job (cancel, hold, release, requeue): which a job allows,
// their buttons, and running one after a confirmation.
import { h, confirmDialog, toast, showError } from './dom.js';
import { post, mayAct } from './api.js';
import { t } from './i18n.js';

// What the daemon accepts in each state (service: cancel, requeue, hold).
export function actionsFor(job) {
  if (!mayAct(job)) return [];
  const s = job.state;
  const out = [];
  if (s === 'queued' && !job.held_by) out.push('hold');
  if (s === 'queued' && job.held_by) out.push('release');
  if (s !== 'queued' && s !== 'preempted') out.push('requeue'); // running, or ended
  if (s === 'queued' || s === 'running' || s === 'preempted') out.push('cancel');
  return out;
}

export async function runAction(job, action, after) {
  const label = job.name ? `${job.id} (${job.name})` : String(job.id);
  const ok = await confirmDialog(t('confirm.' + action, { job: label }), t('action.' + action));
  if (!ok) return false;
  try {
    await post(`/v1/jobs/${encodeURIComponent(job.id)}/${action}`);
    toast(t('done.' + action, { job: label }), 'ok');
  } catch (e) {
    showError(e);
  }
  if (after) after();
  return true;
}

export function actionButtons(job, after) {
  return actionsFor(job).map((a) => h('button', {
    type: 'button',
    class: 'btn btn-small' + (a === 'cancel' ? ' btn-danger' : ''),
    dataset: { action: a, jobId: job.id },
    title: t('action.' + a + '.title'),
    onclick: (ev) => { ev.stopPropagation(); runAction(job, a, after); },
  }, t('action.' + a)));
}
