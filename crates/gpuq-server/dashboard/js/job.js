// #/job/ID: one job: its facts, live log, metric charts, GPU use over its
// life, attempts, events, cost and advice, reproducibility record.
import { h, add, clear, card, dl, table, stateBadge, jobLink, runtimeEl, timeEl, money, mib, pct, num, hours, text, tick, debounce, showError, DASH } from './dom.js';
import { get, getRaw, qs, mayAct } from './api.js';
import { actionButtons } from './actions.js';
import { chart, clean, ema, destroyAll, fmtAxis, PALETTE } from './charts.js';
import { t } from './i18n.js';
import { reasonText } from './reasons.js';

const LOG_KEEP = 2 * 1024 * 1024; // characters of log kept in the page
const CHUNK = 1 << 20; // the server's largest log read

export function mount(root, route, app) {
  const id = route.arg;
  const api = (p) => '/v1/jobs/' + encodeURIComponent(id) + p;
  let job = null;
  let detail = null;
  let destroyed = false;
  const timers = [];

  const head = h('div', { class: 'page-head' }, h('h1', null, t('job.title', { id })));
  const facts = h('div', { id: 'job-facts' });
  const metricsBody = h('div', { id: 'job-metrics' }, h('p', { class: 'muted' }, t('loading')));
  const logPre = h('pre', { id: 'log', class: 'log', tabindex: '0' });
  const logText = document.createTextNode('');
  logPre.append(logText);
  const logStatus = h('span', { class: 'muted small', id: 'log-status' });
  const follow = h('input', { type: 'checkbox', id: 'log-follow', checked: true });
  const attemptSel = h('select', { id: 'log-attempt', 'aria-label': t('job.attempt') });
  const logMsg = h('p', { class: 'muted', id: 'log-message' });
  const gpuBody = h('div', { id: 'job-gpu' });
  const costBody = h('div', { id: 'job-cost' });
  const attemptsBody = h('div', { id: 'job-attempts' });
  const eventsBody = h('div', { id: 'job-events' });
  const reproBody = h('div', { id: 'job-repro-body' }, h('p', { class: 'muted' }, t('loading')));
  const repro = h('details', { id: 'job-repro', class: 'card collapsible' }, h('summary', null, h('h2', { class: 'card-title' }, t('job.repro'))), reproBody);

  clear(root, head, facts,
    card(t('job.metrics'), metricsBody),
    card(t('job.log'),
      h('div', { class: 'toolbar' },
        h('label', { class: 'field inline' }, h('span', null, t('job.attempt')), attemptSel),
        h('label', { class: 'check' }, follow, t('job.follow')),
        logStatus),
      logMsg, logPre),
    h('div', { class: 'two-col' }, card(t('job.gpu'), gpuBody), card(t('job.costAdvice'), costBody)),
    card(t('job.attempts'), attemptsBody),
    card(t('job.events'), eventsBody),
    repro);

  // ---- facts -------------------------------------------------------------
  function renderHead() {
    clear(head,
      h('h1', null, t('job.title', { id: job.id }), job.name ? h('span', { class: 'title-name' }, ' ' + job.name) : null),
      stateBadge(job.state), job.state === 'queued' && job.held_by ? h('span', { class: 'tag' }, t('queue.heldBy', { who: job.held_by })) : null,
      h('div', { class: 'head-actions', id: 'job-actions' }, actionButtons(job, refresh)));
  }

  function kv(obj) {
    const keys = Object.keys(obj || {});
    if (!keys.length) return null;
    return h('table', { class: 'kv' }, h('tbody', null, keys.map((k) => h('tr', null,
      h('th', null, k), h('td', null, typeof obj[k] === 'string' ? obj[k] : JSON.stringify(obj[k]))))));
  }

  function renderFacts(why) {
    const s = job.spec || {};
    const exit = job.exit_code != null ? t('job.exitCode', { code: job.exit_code }) : job.signal != null ? t('job.signal', { sig: job.signal }) : null;
    const arr = job.array_id != null ? h('span', null, jobLink(job.array_id), ' [' + job.array_index + ']') : undefined;
    clear(facts,
      card(null,
        dl([
          [t('col.state'), stateBadge(job.state)],
          [t('col.user'), job.user],
          [t('col.project'), text(job.project)],
          [t('col.gpus'), String(job.gpus_requested) + (job.gpus.length ? ' [' + job.gpus.join(',') + ']' : '') + (s.gpu_type ? ' · ' + s.gpu_type : '')],
          [t('job.node'), text(job.node)],
          [t('job.priority'), t('prio.' + job.priority, null, job.priority)],
          [t('job.submitted'), timeEl(job.submitted_at)],
          [t('job.started'), timeEl(job.started_at)],
          [t('job.ended'), timeEl(job.ended_at)],
          [t('col.runtime'), runtimeEl(job.started_at, job.ended_at)],
          [t('job.attempt'), job.attempt + (job.failures ? ' · ' + t('job.failures', { n: job.failures }) : '') + (s.retries ? ' · ' + t('job.retries', { n: s.retries }) : '')],
          [t('col.cost'), money(job.cost)],
          ...hostFacts(),
          [t('job.timeLimit'), s.time_limit || undefined],
          [t('job.exit'), exit || undefined],
          [t('job.array'), arr],
          [t('job.after'), s.after && s.after.length ? s.after.map((a, i) => [i ? ', ' : '', jobLink(a)]) : undefined],
          [t('job.preemptible'), s.preemptible ? t('yes') : undefined],
        ], 'facts-grid'),
        dl([
          [job.state === 'queued' ? t('job.why') : t('col.reason'), text(reasonText(why || job.reason))],
          [t('job.command'), h('code', { class: 'command' }, job.command)],
          [t('job.cwd'), h('code', null, job.cwd)],
          [t('job.params'), kv(s.params) || undefined],
          [t('job.env'), kv(s.env) || h('span', { class: 'muted' }, t('job.noEnv'))],
        ], 'facts-wide')));
  }

  // Memory and CPU of the latest attempt its cgroup counted, next to what was asked.
  function hostFacts() {
    const a = [...detail.attempts].reverse().find((x) => x.host_usage);
    if (!a) return [];
    const u = a.host_usage;
    const of = a.attempt === job.attempt ? '' : ' (' + t('job.attempt') + ' ' + a.attempt + ')';
    const peak = bytes(u.memory_peak_bytes);
    let mem = u.memory_limit_bytes != null
      ? t((job.spec || {}).memory ? 'job.memAsked' : 'job.memGiven', { limit: bytes(u.memory_limit_bytes), peak })
      : u.memory_peak_bytes != null ? t('job.memNoLimit', { peak }) : null;
    const memEl = mem == null && !u.oom_killed ? undefined
      : h('span', { id: 'job-memory' }, mem || '', u.oom_killed ? [mem ? ' · ' : '', h('span', { class: 'badge bad' }, t('job.oom'))] : '', of);
    let cpuEl;
    if (u.cpu_seconds != null) {
      const cores = u.cpus ? t('job.cores', { n: u.cpus }) : t('job.noCores');
      const wall = a.ended_at != null ? (a.ended_at - a.started_at) / 1000 : 0;
      const busy = wall > 0 ? ' (' + t('job.coresBusy', { n: num(u.cpu_seconds / wall, 1) }) + ')' : '';
      cpuEl = h('span', { id: 'job-cpu' }, cores + ', ' + cpuTime(u.cpu_seconds) + busy + of);
    }
    return [[t('job.memory'), memEl], [t('job.cpu'), cpuEl]];
  }

  function renderAttempts() {
    const rows = detail.attempts.map((a) => {
      const end = a.exit_code != null ? t('job.exitCode', { code: a.exit_code }) : a.signal != null ? t('job.signal', { sig: a.signal }) : '';
      const u = a.gpu_usage || {};
      const host = a.host_usage || {};
      const hostMem = host.memory_peak_bytes != null || host.memory_limit_bytes != null
        ? bytes(host.memory_peak_bytes) + ' / ' + bytes(host.memory_limit_bytes) : DASH;
      return h('tr', { dataset: { attempt: a.attempt } },
        h('td', { class: 'num' }, String(a.attempt)),
        h('td', null, a.node),
        h('td', null, a.gpus.join(',') || DASH),
        h('td', null, timeEl(a.started_at)),
        h('td', null, timeEl(a.ended_at)),
        h('td', { class: 'num' }, runtimeEl(a.started_at, a.ended_at)),
        h('td', { class: 'nowrap' }, end || DASH),
        h('td', { class: 'reason', title: a.reason || null }, text(reasonText(a.reason))),
        h('td', { class: 'num' }, pct(u.util_avg_percent)),
        h('td', { class: 'num' }, mib(u.memory_peak_mib)),
        h('td', { class: 'num nowrap' }, hostMem, host.oom_killed ? [' ', h('span', { class: 'badge bad' }, t('job.oom'))] : ''),
        h('td', { class: 'num' }, host.cpu_seconds != null ? cpuTime(host.cpu_seconds) : DASH),
        h('td', { class: 'num' }, a.rate_per_hour != null ? money(a.rate_per_hour) + t('perHour') : DASH));
    });
    clear(attemptsBody, table('attempts', [
      { label: '#', class: 'num' }, t('job.node'), t('col.gpus'), t('job.started'), t('job.ended'),
      { label: t('job.duration'), class: 'num' }, t('job.exit'), t('job.endCause'),
      { label: t('job.utilAvg'), class: 'num' }, { label: t('job.memPeak'), class: 'num' },
      { label: t('job.hostMem'), class: 'num' }, { label: t('job.cpuTime'), class: 'num' }, { label: t('job.rate'), class: 'num' },
    ], rows, t('job.noAttempts')));
  }

  function renderEvents() {
    const rows = [...detail.events].reverse().map((e) => h('tr', { dataset: { eventKind: e.kind } },
      h('td', null, timeEl(e.at)), h('td', null, h('span', { class: 'tag' }, e.kind)), h('td', { class: 'detail' }, e.detail)));
    clear(eventsBody, table('events', [t('col.time'), t('job.kind'), t('job.detail')], rows, DASH));
  }

  function renderAttemptChoice() {
    const want = String(logAttempt || job.attempt);
    const have = [...attemptSel.options].map((o) => o.value).join(',');
    const opts = [];
    for (let i = job.attempt; i >= 1; i--) opts.push(String(i));
    if (have !== opts.join(',')) {
      clear(attemptSel, opts.map((v) => h('option', { value: v }, v + (v === String(job.attempt) ? ' · ' + t('job.latest') : ''))));
      if (!opts.length) attemptSel.append(h('option', { value: '0' }, DASH));
    }
    attemptSel.value = want;
  }

  // ---- detail refresh -------------------------------------------------------
  async function refresh() {
    try {
      detail = await get(api(''));
    } catch (e) {
      if (destroyed) return;
      if (!job) clear(facts, h('p', { class: 'error-box' }, e.message));
      showError(e);
      return;
    }
    if (destroyed) return;
    const prev = job;
    job = detail;
    document.title = t('job.title', { id: job.id }) + ' · gpuq';
    let why = null;
    if (job.state === 'queued') {
      try { why = (await get(api('/explain'))).explanation; } catch (e) { /* the reason stays */ }
    }
    renderHead();
    renderFacts(why);
    renderAttempts();
    renderEvents();
    if (!prev) renderGpu();
    renderCost();
    // A new attempt: a log that follows the latest starts on it.
    if (!pinned && job.attempt !== logAttempt) switchLog(job.attempt);
    renderAttemptChoice();
    if (!prev || prev.state !== job.state || prev.attempt !== job.attempt) {
      pollLog();
      loadMetrics();
      loadHistory();
      if (!prev) { loadRepro(); loadAdvice(); }
    }
  }

  // ---- log ------------------------------------------------------------------
  let logAttempt = 0;
  let logOffset = 0;
  let logDone = false;
  let pinned = false;
  let logBusy = false;
  let logTimer = 0;
  let decoder = new TextDecoder('utf-8');

  function switchLog(attempt) {
    logAttempt = attempt;
    logOffset = 0;
    logDone = false;
    decoder = new TextDecoder('utf-8');
    logText.data = '';
    logMsg.textContent = '';
    logMsg.className = 'muted';
    logPre.hidden = false;
  }

  attemptSel.addEventListener('change', () => {
    const a = Number(attemptSel.value);
    pinned = a !== job.attempt;
    switchLog(a);
    pollLog();
  });
  follow.addEventListener('change', () => { if (follow.checked) logPre.scrollTop = logPre.scrollHeight; });
  logPre.addEventListener('scroll', () => {
    const atEnd = logPre.scrollHeight - logPre.scrollTop - logPre.clientHeight < 24;
    if (follow.checked !== atEnd && document.activeElement === logPre) follow.checked = atEnd;
  });

  function appendLog(s) {
    if (!s) return;
    logText.appendData(s);
    if (logText.length > LOG_KEEP) {
      logText.deleteData(0, logText.length - LOG_KEEP);
      logMsg.textContent = t('job.logTrimmed');
    }
    if (follow.checked) logPre.scrollTop = logPre.scrollHeight;
  }

  async function pollLog() {
    clearTimeout(logTimer);
    if (destroyed || logBusy || !job) return;
    // The server lets only the owner or an admin read a log: say so without asking.
    if (!mayAct(job)) {
      logMsg.textContent = t('job.logNotYours', { user: job.user });
      logStatus.textContent = '';
      logPre.hidden = true;
      return;
    }
    if (job.attempt === 0) {
      if (job.state === 'queued') {
        logStatus.textContent = t('job.logWaiting');
        logTimer = setTimeout(pollLog, 2000);
      } else {
        logStatus.textContent = '';
        logMsg.textContent = t('job.neverStarted');
        logPre.hidden = true;
      }
      return;
    }
    if (logDone) return;
    logBusy = true;
    const attempt = logAttempt || job.attempt;
    try {
      for (;;) {
        // The first read of a long log starts near its end: no need to fetch what is not kept.
        const first = logOffset === 0;
        const res = await getRaw(api('/log' + qs({ offset: logOffset, attempt, tail: first ? LOG_KEEP : null })));
        const buf = await res.arrayBuffer();
        if (destroyed || attempt !== (logAttempt || job.attempt)) return;
        const next = Number(res.headers.get('x-gpuq-log-offset'));
        logOffset = Number.isFinite(next) ? next : logOffset + buf.byteLength;
        if (first && logOffset - buf.byteLength > 0) logMsg.textContent = t('job.logTrimmed');
        appendLog(decoder.decode(buf, { stream: true }));
        logDone = res.headers.get('x-gpuq-log-complete') === 'true';
        if (logDone || buf.byteLength < CHUNK) break;
      }
      if (logDone) {
        appendLog(decoder.decode());
        if (!logText.length) logMsg.textContent = t('job.logEmpty');
      }
      logStatus.textContent = logDone ? t('job.logComplete') : t('job.logLive');
      logStatus.dataset.state = logDone ? 'complete' : 'live';
    } catch (e) {
      // 403: only the owner or an admin reads a log; say so where the log would be.
      logMsg.textContent = e.message;
      logMsg.className = 'error-box';
      logStatus.textContent = '';
      if (e.status === 403 || e.status === 404) logDone = true;
    } finally {
      logBusy = false;
    }
    if (!logDone && !destroyed) logTimer = setTimeout(pollLog, job.state === 'running' ? 1000 : 2000);
  }

  // ---- metrics --------------------------------------------------------------
  const charts = [];
  let series = [];
  let selected = null; // Set of keys
  let logScale = false;
  let smooth = 0;
  let metricBox = null;

  async function loadMetrics() {
    try {
      const m = await get(api('/metrics?max_points=500'));
      if (destroyed) return;
      const before = series.map((s) => s.key).join('\n');
      series = m.series || [];
      if (!selected) selected = new Set(series.slice(0, 4).map((s) => s.key));
      if (!metricBox || before !== series.map((s) => s.key).join('\n')) renderMetrics();
      else drawMetrics(true);
    } catch (e) {
      if (destroyed) return;
      if (e.status === 404) clear(metricsBody, h('p', { class: 'muted', id: 'metric-none' }, e.message || t('job.noMetrics')));
      else { clear(metricsBody, h('p', { class: 'error-box' }, e.message)); }
    }
  }

  function renderMetrics() {
    destroyAll(charts);
    if (!series.length) {
      metricBox = null;
      clear(metricsBody, h('p', { class: 'muted', id: 'metric-none' }, t(job && ['queued', 'running', 'preempted'].includes(job.state) ? 'job.noMetricsYet' : 'job.noMetricsEnded')));
      return;
    }
    const picks = series.map((s) => h('label', { class: 'chip' + (selected.has(s.key) ? ' on' : '') },
      h('input', { type: 'checkbox', checked: selected.has(s.key), dataset: { metric: s.key },
        onchange: (ev) => {
          if (ev.target.checked) selected.add(s.key); else selected.delete(s.key);
          ev.target.parentElement.classList.toggle('on', ev.target.checked);
          drawMetrics(false);
        } }), s.key));
    const logBox = h('input', { type: 'checkbox', id: 'metric-log', checked: logScale,
      onchange: (ev) => { logScale = ev.target.checked; drawMetrics(false); } });
    const out = h('output', { id: 'metric-smooth-value' }, smooth.toFixed(2));
    const slider = h('input', { type: 'range', id: 'metric-smooth', min: '0', max: '0.99', step: '0.01', value: String(smooth),
      oninput: (ev) => { smooth = Number(ev.target.value); out.textContent = smooth.toFixed(2); drawMetrics(true); } });
    metricBox = h('div', { id: 'metric-chart', class: 'chart-grid' });
    clear(metricsBody,
      h('div', { class: 'toolbar' },
        h('div', { class: 'chips', id: 'metric-keys' }, picks),
        h('label', { class: 'check' }, logBox, t('chart.log')),
        h('label', { class: 'field inline smooth' }, h('span', null, t('chart.smoothing')), slider, out)),
      metricBox);
    drawMetrics(false);
  }

  function metricData(s) {
    const xs = s.points.map((p) => p.step);
    const raw = s.points.map((p) => clean(p.value, logScale));
    return smooth > 0 ? [xs, raw, ema(raw, smooth)] : [xs, raw];
  }

  function drawMetrics(dataOnly) {
    if (!metricBox) return;
    const keys = series.filter((s) => selected.has(s.key));
    const shape = keys.length + ':' + (smooth > 0) + ':' + logScale;
    if (dataOnly && charts.length === keys.length && metricBox.dataset.shape === shape) {
      keys.forEach((s, i) => {
        charts[i].setData(metricData(s));
        charts[i].title.textContent = titleOf(s);
      });
      return;
    }
    destroyAll(charts);
    metricBox.replaceChildren();
    metricBox.dataset.shape = shape;
    if (!keys.length) { metricBox.append(h('p', { class: 'muted' }, t('job.pickMetric'))); return; }
    keys.forEach((s, i) => {
      const color = PALETTE[series.indexOf(s) % PALETTE.length];
      const title = h('h3', { class: 'chart-title' }, titleOf(s));
      const box = h('div', { class: 'chart-box' });
      metricBox.append(h('div', { class: 'chart', dataset: { metricKey: s.key } }, title, box));
      const lines = smooth > 0
        ? [{ label: s.key, color: color + '55', width: 1 }, { label: t('chart.smoothed'), color, width: 2 }]
        : [{ label: s.key, color, width: 1.5 }];
      const c = chart(box, { series: lines, data: metricData(s), yLog: logScale, height: 200, xLabel: t('chart.step'),
        axes: { y: { fmt: fmtAxis } } });
      c.title = title;
      charts.push(c);
    });
  }

  function titleOf(s) {
    const v = s.latest && s.latest.value;
    const shown = typeof v === 'number' ? fmtValue(v) : String(v ?? DASH);
    return s.key + ' · ' + shown + ' @ ' + (s.latest ? s.latest.step : DASH) + (s.downsampled ? ' · ' + t('chart.downsampled', { n: s.count }) : '');
  }

  // ---- GPU use over the job's life -------------------------------------------
  const gpuCharts = [];
  let history = null;

  async function loadHistory() {
    if (!job || !job.started_at) { history = null; renderGpu(); return; }
    const first = detail.attempts.length ? Math.min(...detail.attempts.map((a) => a.started_at)) : job.started_at;
    try {
      history = await get('/v1/gpus/history' + qs({ since: first, max_points: 300 }));
    } catch (e) {
      history = null;
    }
    if (!destroyed) renderGpu();
  }

  function renderGpu() {
    if (!detail) return;
    destroyAll(gpuCharts);
    const u = detail.gpu_usage;
    const summary = u ? dl([
      [t('job.gpuHours'), hours(u.gpu_seconds / 3600)],
      [t('job.utilAvg'), pct(u.util_avg_percent)],
      [t('job.utilPeak'), pct(u.util_peak_percent)],
      [t('job.memPeak'), mib(u.memory_peak_mib)],
      [t('job.energy'), u.energy_j != null ? num(u.energy_j / 3.6e6, 3) + ' kWh' : DASH],
    ], 'facts-grid compact') : h('p', { class: 'muted' }, t('job.noTelemetry'));
    const body = [summary];
    const mine = (history || []).filter((g) => job.gpus.includes(g.index));
    const start = job.started_at || 0;
    const end = job.ended_at || Date.now();
    const pts = mine.map((g) => g.points.filter((p) => p.at >= start - 5000 && p.at <= end + 5000));
    const xs = [...new Set(pts.flat().map((p) => p.at))].sort((a, b) => a - b);
    let boxes = [];
    if (xs.length > 1) {
      const col = (g, f) => { const m = new Map(pts[g].map((p) => [p.at, f(p)])); return xs.map((x) => m.get(x) ?? null); };
      const utilBox = h('div', { class: 'chart-box' });
      const memBox = h('div', { class: 'chart-box' });
      body.push(h('div', { class: 'chart-grid', id: 'job-gpu-charts' },
        h('div', { class: 'chart' }, h('h3', { class: 'chart-title' }, t('gpu.util')), utilBox),
        h('div', { class: 'chart' }, h('h3', { class: 'chart-title' }, t('gpu.memory')), memBox)));
      const x = xs.map((v) => v / 1000);
      boxes = [
        [utilBox, { time: true, height: 160, yRange: [0, 100], series: mine.map((g) => ({ label: 'GPU ' + g.index, fmt: (v) => pct(v) })),
          data: [x, ...mine.map((g, i) => col(i, (p) => p.util_percent))], axes: { y: { fmt: (v) => v + '%' } } }],
        [memBox, { time: true, height: 160, series: mine.map((g) => ({ label: 'GPU ' + g.index, fmt: (v) => num(v, 1) + ' GiB' })),
          data: [x, ...mine.map((g, i) => col(i, (p) => (p.memory_used_mib == null ? null : p.memory_used_mib / 1024)))],
          yRange: (u, lo, hi) => [0, Math.max(1, (hi ?? 0) * 1.15)], axes: { y: { fmt: (v) => num(v, v < 10 ? 1 : 0) + 'G' } } }],
      ];
    } else if (job.started_at) {
      body.push(h('p', { class: 'muted small' }, t('job.noHistory')));
    }
    clear(gpuBody, body);
    for (const [box, spec] of boxes) gpuCharts.push(chart(box, spec));
  }

  // ---- cost and advice -------------------------------------------------------
  let advice = null;
  async function loadAdvice() {
    try { advice = await get(api('/advice')); } catch (e) { advice = { error: e.message }; }
    if (!destroyed) renderCost();
  }

  function renderCost() {
    if (!detail) return;
    const rates = detail.attempts.filter((a) => a.rate_per_hour != null);
    const parts = [dl([
      [t('col.cost'), money(job.cost)],
      [t('job.rate'), rates.length ? money(rates[rates.length - 1].rate_per_hour) + t('perHour') : t('job.noPrice')],
    ], 'facts-grid compact')];
    if (advice && advice.error) parts.push(h('p', { class: 'muted small' }, advice.error));
    else if (advice) {
      parts.push(h('p', { class: 'small' }, advice.basis));
      if (advice.options && advice.options.length) {
        parts.push(table('advice', [t('advice.gpu'), { label: t('advice.mem'), class: 'num' }, { label: t('advice.price'), class: 'num' },
          t('advice.offer'), { label: t('advice.time'), class: 'num' }, { label: t('advice.cost'), class: 'num' }],
        advice.options.slice(0, 6).map((o) => h('tr', null,
          h('td', null, o.gpu_model), h('td', { class: 'num' }, o.memory_gib + ' GiB'),
          h('td', { class: 'num' }, money(o.gpu_hour) + t('perHour')), h('td', { class: 'small' }, o.offer),
          h('td', { class: 'num' }, '×' + num(o.time_factor, 2)),
          h('td', { class: 'num' }, money(o.estimated_cost), o.cost_factor != null ? h('span', { class: 'muted small' }, ' ×' + num(o.cost_factor, 2)) : null)))));
      }
      if (advice.hints && advice.hints.length) parts.push(h('ul', { class: 'hints' }, advice.hints.map((x) => h('li', null, x))));
    }
    clear(costBody, parts);
  }

  // ---- reproducibility ---------------------------------------------------------
  async function loadRepro() {
    try {
      renderRepro(await get(api('/repro')));
    } catch (e) {
      if (!destroyed) clear(reproBody, h('p', { class: 'error-box' }, e.message));
    }
  }

  function pre(s, cls) { return h('pre', { class: 'block ' + (cls || '') }, s); }
  function more(label, content) { return h('details', { class: 'inner' }, h('summary', null, label), content); }

  function renderRepro(v) {
    if (destroyed) return;
    const r = v.repro;
    const out = [];
    if (!r) out.push(h('p', { class: 'muted' }, t('repro.none')));
    else {
      const g = r.git;
      const p = r.python;
      // The diff, untracked names and packages of someone else's job: counted, not shown.
      const w = r.withheld;
      out.push(dl([
        [t('repro.captured'), timeEl(r.captured_at)],
        [t('repro.host'), text(r.hostname)],
        [t('job.cwd'), h('code', null, r.cwd)],
        [t('job.command'), r.command && r.command.length ? h('code', { class: 'command' }, r.command.join(' ')) : r.script ? pre(r.script) : DASH],
      ], 'facts-grid'));
      out.push(h('h3', { class: 'sub' }, 'Git'));
      out.push(g ? dl([
        [t('repro.commit'), g.commit ? h('code', { id: 'repro-commit' }, g.commit) : DASH],
        [t('repro.branch'), text(g.branch)],
        [t('repro.remote'), text(g.remote)],
        [t('repro.root'), h('code', null, g.root)],
        [t('repro.dirty'), h('span', { class: 'badge ' + (g.dirty ? 'warn' : 'ok'), id: 'repro-dirty', dataset: { dirty: g.dirty } }, g.dirty ? t('repro.dirtyYes') : t('repro.clean'))],
        [t('repro.diff'), w && g.dirty ? h('span', { class: 'muted', id: 'repro-withheld' }, t('repro.diffSize', { n: num(g.diff_bytes) }) + ' · ' + t('repro.withheld')) : g.diff ? more(t('repro.diffSize', { n: num(g.diff_bytes) }) + (g.diff_truncated ? ' · ' + t('repro.truncated') : ''), pre(g.diff, 'diff')) : DASH],
        [t('repro.untracked'), w && w.untracked ? h('span', { class: 'muted' }, String(w.untracked) + ' · ' + t('repro.withheld')) : g.untracked.length ? more(String(g.untracked.length) + (g.untracked_truncated ? '+' : ''), pre(g.untracked.join('\n'))) : '0'],
      ], 'facts-grid') : h('p', { class: 'muted' }, t('repro.noGit')));
      out.push(h('h3', { class: 'sub' }, 'Python'));
      out.push(p ? dl([
        [t('repro.version'), text(p.version)],
        [t('repro.executable'), h('code', null, p.executable)],
        [t('repro.venv'), text(p.virtual_env)],
        [t('repro.lock'), p.lock ? h('span', null, h('code', null, p.lock.path), ' ', h('span', { class: 'muted small' }, 'sha256 ' + p.lock.sha256.slice(0, 16) + '…')) : DASH],
        [t('repro.packages'), w && w.packages ? h('span', { class: 'muted' }, String(w.packages) + ' · ' + t('repro.withheld')) : p.packages.length ? more(String(p.packages.length), pre(p.packages.join('\n'))) : '0'],
      ], 'facts-grid') : h('p', { class: 'muted' }, t('repro.noPython')));
      const envKeys = Object.keys(r.env || {});
      if (envKeys.length) out.push(more(t('repro.env', { n: envKeys.length }), kv(r.env)));
      if (r.notes && r.notes.length) out.push(h('ul', { class: 'hints' }, r.notes.map((n) => h('li', null, n))));
    }
    if (v.runtime && v.runtime.length) {
      out.push(h('h3', { class: 'sub' }, t('repro.runtime')));
      out.push(table('runtime', [t('job.attempt'), t('repro.host'), t('col.gpus'), t('repro.driver'), 'CUDA'],
        v.runtime.map((x) => h('tr', null, h('td', { class: 'num' }, String(x.attempt)), h('td', null, x.hostname),
          h('td', null, x.gpus.map((gg) => gg.index + ': ' + gg.model).join(', ') || DASH),
          h('td', null, text(x.driver_version)), h('td', null, text(x.cuda_version))))));
    }
    clear(reproBody, out);
  }

  // ---- life ----------------------------------------------------------------
  const later = debounce(refresh, 250);
  timers.push(setInterval(() => { tick(root); }, 1000));
  timers.push(setInterval(() => {
    if (job && job.state === 'running') { refresh(); loadMetrics(); loadHistory(); }
  }, 10000));
  refresh();

  return {
    feed(type, item) {
      if (type === 'job' && String(item.job_id) === String(id)) later();
    },
    destroy() {
      destroyed = true;
      for (const x of timers) clearInterval(x);
      clearTimeout(logTimer);
      later.cancel();
      destroyAll(charts);
      destroyAll(gpuCharts);
    },
  };
}

export function fmtValue(v) {
  if (typeof v !== 'number' || !Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3);
  return String(Number(v.toPrecision(5)));
}

// Bytes as the page writes memory (MiB, GiB); unknown is a dash, never 0.
function bytes(v) {
  return v == null ? DASH : mib(v / 1048576);
}

// CPU time in the unit that reads best, as `gpuq show` writes it.
function cpuTime(s) {
  if (s < 60) return t('job.coreSeconds', { n: num(s, s < 10 ? 1 : 0) });
  if (s < 3600) return t('job.coreMinutes', { n: num(s / 60) });
  return t('job.coreHours', { h: num(s / 3600, 1) });
}
