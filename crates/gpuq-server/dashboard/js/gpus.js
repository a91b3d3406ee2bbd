// #/gpus: a card per GPU: who holds it, its latest reading, its history over
// 15 minutes or 24 hours, and the idle alerts that concern it.
import { h, clear, jobLink, timeEl, mib, pct, num, text, debounce, showError, DASH } from './dom.js';
import { get, qs } from './api.js';
import { chart, destroyAll } from './charts.js';
import { t } from './i18n.js';

const WINDOWS = { '15m': 15 * 60_000, '24h': 24 * 3_600_000 };
const IDLE_KINDS = new Set(['job_idle', 'node_idle', 'gpu_memory_high', 'gpu_temperature_high', 'gpu_xid', 'gpu_lost']);

export function mount(root, route, app) {
  let win = Object.hasOwn(WINDOWS, route.params.get('window') || '') ? route.params.get('window') : '15m';
  let gpus = [];
  let history = [];
  let alerts = [];
  let destroyed = false;
  const charts = [];
  const cards = new Map(); // node/index -> {el, parts}
  const key = (g) => g.node + '/' + g.index;

  const toggle = h('div', { class: 'segmented', id: 'gpu-window', role: 'group' },
    Object.keys(WINDOWS).map((w) => h('button', { type: 'button', class: 'seg', dataset: { window: w },
      'aria-pressed': String(w === win), onclick: () => app.navigate('#/gpus' + qs({ window: w === '15m' ? '' : w })) }, t('gpu.window.' + w))));
  const sub = h('p', { class: 'muted small', id: 'gpu-discovery' });
  const grid = h('div', { class: 'gpu-grid', id: 'gpu-cards' }, h('p', { class: 'muted' }, t('loading')));
  clear(root, h('div', { class: 'page-head' }, h('h1', null, t('nav.gpus')), toggle), sub, grid);

  get('/v1/info').then((i) => { sub.textContent = i.node + ' · ' + i.gpu_discovery; }).catch(() => {});

  function bar(v, cls) {
    const fill = h('span', { class: 'meter-fill ' + (cls || '') });
    fill.style.width = Math.max(0, Math.min(100, v ?? 0)) + '%';
    return h('span', { class: 'meter' + (v == null ? ' unknown' : '') }, fill);
  }

  function stat(label, value, meter) {
    return h('div', { class: 'stat' }, h('div', { class: 'stat-label' }, label), h('div', { class: 'stat-value' }, value), meter || null);
  }

  function build(g) {
    const holder = h('div', { class: 'holder' });
    const stats = h('div', { class: 'stats' });
    const alertBox = h('div', { class: 'gpu-alerts' });
    const utilBox = h('div', { class: 'chart-box' });
    const heatBox = h('div', { class: 'chart-box' });
    const el = h('section', { class: 'card gpu-card', dataset: { gpu: g.index, node: g.node } },
      h('div', { class: 'gpu-head' },
        h('h2', { class: 'card-title' }, 'GPU ' + g.index),
        h('span', { class: 'muted small' }, g.model + ' · ' + mib(g.memory_mib) + ' · ' + g.node)),
      holder, stats, alertBox,
      h('div', { class: 'chart' }, h('h3', { class: 'chart-title' }, t('gpu.utilMem')), utilBox),
      h('div', { class: 'chart' }, h('h3', { class: 'chart-title' }, t('gpu.tempPower')), heatBox));
    return { el, holder, stats, alertBox, utilBox, heatBox };
  }

  function fill(c, g) {
    const r = g.reading || {};
    c.el.dataset.busy = g.job != null ? 'true' : 'false';
    clear(c.holder, g.job != null
      ? [h('span', { class: 'badge state-running' }, t('gpu.busy')), ' ', jobLink(g.job, '#' + g.job + (g.job_name ? ' ' + g.job_name : '')), ' · ', h('span', { class: 'user' }, text(g.user))]
      : [h('span', { class: 'badge state-idle' }, t('gpu.free'))]);
    const memPct = r.memory_used_mib != null && (r.memory_total_mib || g.memory_mib) ? (r.memory_used_mib * 100) / (r.memory_total_mib || g.memory_mib) : null;
    clear(c.stats,
      stat(t('gpu.util'), pct(r.util_percent), bar(r.util_percent)),
      stat(t('gpu.memory'), r.memory_used_mib != null ? h('span', null, mib(r.memory_used_mib), h('span', { class: 'of' }, ' / ' + mib(r.memory_total_mib || g.memory_mib))) : DASH, bar(memPct, memPct > 95 ? 'hot' : '')),
      stat(t('gpu.temp'), r.temperature_c != null ? num(r.temperature_c) + ' °C' : DASH, bar(r.temperature_c, r.temperature_c >= 85 ? 'hot' : '')),
      stat(t('gpu.power'), r.power_w != null ? num(r.power_w) + ' W' : DASH),
      r.lost ? h('span', { class: 'badge state-failed' }, t('gpu.lost')) : null);
    const mine = alerts.filter((a) => IDLE_KINDS.has(a.kind) && (a.gpu === g.index || (g.job != null && a.job === g.job)))
      .filter((a) => a.at >= Date.now() - WINDOWS[win]).slice(0, 3);
    clear(c.alertBox, mine.map((a) => h('div', { class: 'alert-line', dataset: { alertKind: a.kind } },
      h('span', { class: 'badge warn' }, t('alert.' + a.kind, null, a.kind)), ' ', timeEl(a.at), ' ', h('span', null, a.message))));
  }

  function draw() {
    destroyAll(charts);
    const since = Date.now() - WINDOWS[win];
    for (const g of gpus) {
      const c = cards.get(key(g));
      const hist = history.find((x) => x.index === g.index);
      const pts = hist ? hist.points.filter((p) => p.at >= since) : [];
      const total = (g.reading && g.reading.memory_total_mib) || g.memory_mib;
      const xs = pts.map((p) => p.at / 1000);
      const range = [since / 1000, Date.now() / 1000];
      if (pts.length < 2) {
        clear(c.utilBox, h('p', { class: 'muted small' }, t('gpu.noHistory')));
        clear(c.heatBox);
        continue;
      }
      c.utilBox.replaceChildren();
      c.heatBox.replaceChildren();
      charts.push(chart(c.utilBox, {
        time: true, height: 140, xRange: range, yRange: [0, 100],
        series: [{ label: t('gpu.util'), fmt: (v) => pct(v), fill: '#2563eb18' }, { label: t('gpu.memory'), fmt: (v) => pct(v) }],
        data: [xs, pts.map((p) => p.util_percent ?? null), pts.map((p) => (p.memory_used_mib != null && total ? (p.memory_used_mib * 100) / total : null))],
        axes: { y: { fmt: (v) => v + '%' } },
      }));
      charts.push(chart(c.heatBox, {
        time: true, height: 140, xRange: range,
        series: [{ label: t('gpu.temp'), color: '#dc2626', fmt: (v) => num(v) + ' °C' }, { label: t('gpu.power'), color: '#7c3aed', scale: 'y2', fmt: (v) => num(v) + ' W' }],
        data: [xs, pts.map((p) => p.temperature_c ?? null), pts.map((p) => p.power_w ?? null)],
        yRange: (u, lo, hi) => [Math.min(20, lo ?? 20), Math.max(90, hi ?? 90)],
        axes: { y: { fmt: (v) => v + '°' }, y2: { fmt: (v) => v + 'W', range: (u, lo, hi) => [0, Math.max(100, (hi ?? 0) * 1.1)] } },
      }));
    }
  }

  function render() {
    if (!gpus.length) {
      cards.clear();
      clear(grid, h('p', { class: 'muted', id: 'gpu-none' }, t('gpu.none')));
      return;
    }
    const want = gpus.map(key).join(',');
    if (grid.dataset.layout !== want) {
      grid.dataset.layout = want;
      cards.clear();
      grid.replaceChildren();
      for (const g of gpus) {
        const c = build(g);
        cards.set(key(g), c);
        grid.append(c.el);
      }
    }
    for (const g of gpus) fill(cards.get(key(g)), g);
  }

  async function loadStatus() {
    try {
      gpus = await get('/v1/gpus');
      if (!destroyed) render();
    } catch (e) {
      if (!destroyed) showError(e);
    }
  }

  async function loadHistory() {
    try {
      const since = Date.now() - WINDOWS[win];
      history = await get('/v1/gpus/history' + qs({ since, max_points: win === '15m' ? 300 : 500 }));
      if (!destroyed && gpus.length) draw();
    } catch (e) {
      if (!destroyed) showError(e);
    }
  }

  async function loadAlerts() {
    try {
      alerts = await get('/v1/alerts?limit=200');
      if (!destroyed && gpus.length) render();
    } catch (e) { /* the cards show without them */ }
  }

  async function all() {
    await Promise.all([loadStatus(), loadAlerts()]);
    await loadHistory();
  }

  const refreshStatus = debounce(loadStatus, 250);
  const timers = [
    setInterval(loadStatus, 5000),
    setInterval(loadHistory, win === '15m' ? 10000 : 60000),
  ];
  all();

  return {
    feed(type, item) {
      if (type === 'job') refreshStatus();
      if (type === 'alert') { alerts.unshift(item); render(); }
    },
    destroy() {
      destroyed = true;
      timers.forEach(clearInterval);
      refreshStatus.cancel();
      destroyAll(charts);
    },
  };
}
