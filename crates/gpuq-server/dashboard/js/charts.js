// uPlot (vendor/uPlot.iife.min.js, loaded before the app as window.uPlot),
// sized to its container and themed like the page.
import { h } from './dom.js';
import { t, lang } from './i18n.js';

export const PALETTE = ['#2563eb', '#d97706', '#059669', '#db2777', '#7c3aed', '#0891b2', '#65a30d', '#dc2626', '#475569', '#c026d3'];
const TIME_ONLY = { hour: '2-digit', minute: '2-digit', hour12: false };
const FULL = { month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false };
function timeTicks(u, splits, axis, space, incr) {
  const opts = incr >= 86400 ? { month: '2-digit', day: '2-digit' } : incr >= 60 ? TIME_ONLY : { ...TIME_ONLY, second: '2-digit' };
  return splits.map((s) => new Date(s * 1000).toLocaleString(lang(), opts));
}
const AXIS = { stroke: '#57606a', grid: { stroke: '#eaeef2', width: 1 }, ticks: { stroke: '#d0d7de', width: 1, size: 4 }, font: '11px system-ui, sans-serif' };

function dateNames() {
  if (!lang().startsWith('zh')) return undefined;
  const months = Array.from({ length: 12 }, (_, i) => (i + 1) + '月');
  const days = ['星期日', '星期一', '星期二', '星期三', '星期四', '星期五', '星期六'];
  return { MMMM: months, MMM: months, WWWW: days, WWW: days.map((d) => d.slice(-1)) };
}

// Axis numbers: short, and readable from 1e-6 to 1e9.
export function fmtAxis(v) {
  if (v == null) return '';
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(1).replace('.0e', 'e');
  return String(Number(v.toPrecision(4)));
}
const numTicks = (u, splits) => splits.map(fmtAxis);
// uPlot takes a key that is present but undefined as a value: leave such keys out.
const defined = (o) => { for (const k of Object.keys(o)) if (o[k] === undefined) delete o[k]; return o; };

// Non-finite and missing values are gaps; a log scale has no room for <= 0.
export function clean(v, log) {
  const n = typeof v === 'number' ? v : null;
  if (n == null || !Number.isFinite(n)) return null;
  if (log && n <= 0) return null;
  return n;
}

// TensorBoard's debiased exponential moving average; gaps stay gaps.
export function ema(values, alpha) {
  if (!alpha) return values;
  let last = 0, n = 0;
  return values.map((v) => {
    if (v == null) return null;
    last = last * alpha + (1 - alpha) * v;
    n++;
    return last / (1 - alpha ** n);
  });
}

// uPlot's points.show as a function: a series with one value (a metric logged
// once) would otherwise draw nothing at all.
function lonePoint(u, si) {
  let n = 0;
  for (const v of u.data[si] || []) if (v != null && ++n > 1) return false;
  return n === 1;
}

// A chart in `box` (an element), redrawn to the box's width.
// spec: {series: [{label, color, width, points, dash, scale, fill}], data, height,
//        time (x in epoch seconds), xLog, yLog, yRange, bars, axes: {x, y, y2: {label, fmt}}}
export function chart(box, spec) {
  const uPlot = window.uPlot;
  const fmtDate = dateNames() ? (tpl) => uPlot.fmtDate(tpl, dateNames()) : undefined;
  const series = [{ label: spec.xLabel || (spec.time ? t('chart.time') : 'x'),
    value: spec.time ? (u, v) => (v == null ? '—' : new Date(v * 1000).toLocaleString(lang(), spec.bars ? { year: 'numeric', month: '2-digit', day: '2-digit' } : FULL)) : undefined }];
  for (const [i, s] of spec.series.entries()) {
    const color = s.color || PALETTE[i % PALETTE.length];
    const one = {
      label: s.label,
      stroke: color,
      width: s.width ?? 1.5,
      scale: s.scale || 'y',
      spanGaps: s.spanGaps ?? false,
      value: s.fmt ? (u, v) => (v == null ? '—' : s.fmt(v)) : undefined,
      // A line needs two points: a series with a single value draws it as a dot.
      points: { show: s.points ? true : lonePoint, size: 6, fill: color, stroke: color },
    };
    if (s.dash) one.dash = s.dash;
    if (s.fill) one.fill = s.fill;
    if (s.points && !s.line) one.paths = () => null;
    if (spec.bars) {
      one.paths = uPlot.paths.bars({ size: [0.6, 60] });
      one.fill = color + 'cc';
      one.points = { show: false };
    }
    if (s.alpha) one.alpha = s.alpha;
    series.push(defined(one));
  }
  const y = spec.axes?.y || {};
  const axes = [
    { ...AXIS, values: spec.axes?.x?.values || (spec.time ? timeTicks : numTicks), incrs: spec.axes?.x?.incrs, space: spec.time ? 70 : 50, label: spec.axes?.x?.label, labelSize: spec.axes?.x?.label ? 18 : 0 },
    { ...AXIS, scale: 'y', size: 54, space: 24, label: y.label, labelSize: y.label ? 18 : 0, values: y.fmt ? (u, vals) => vals.map(y.fmt) : numTicks },
  ];
  if (spec.axes?.y2) {
    const y2 = spec.axes.y2;
    axes.push({ ...AXIS, scale: 'y2', side: 1, size: 50, space: 24, grid: { show: false }, label: y2.label, labelSize: y2.label ? 18 : 0,
      values: y2.fmt ? (u, vals) => vals.map(y2.fmt) : undefined });
  }
  const scales = {
    x: { time: !!spec.time, distr: spec.xLog ? 3 : 1 },
    y: { distr: spec.yLog ? 3 : 1 },
  };
  if (spec.xRange) scales.x.range = spec.xRange;
  if (spec.yRange) scales.y.range = spec.yRange;
  if (spec.axes?.y2) scales.y2 = { range: spec.axes.y2.range };
  axes.forEach(defined);
  defined(series[0]);
  const opts = {
    width: Math.max(200, box.clientWidth || 600),
    height: spec.height || 200,
    series, axes, scales,
    cursor: { points: { size: 6 }, drag: { x: !spec.bars, y: false } },
    legend: { show: spec.legend !== false, live: true },
    padding: [8, spec.time ? 18 : 10, 0, 4],
    fmtDate,
  };
  defined(opts);
  const plot = new uPlot(opts, spec.data, box);
  const ro = new ResizeObserver(() => {
    const w = box.clientWidth;
    if (w > 0 && Math.abs(w - plot.width) > 2) plot.setSize({ width: w, height: opts.height });
  });
  ro.observe(box);
  return {
    plot,
    setData(d) { plot.setData(d); },
    destroy() { ro.disconnect(); plot.destroy(); },
  };
}

// A chart with a heading, in a fresh box; returns {el, chart}.
export function chartCard(title, spec, cls) {
  const box = h('div', { class: 'chart-box' });
  const el = h('div', { class: 'chart ' + (cls || '') }, title ? h('h3', { class: 'chart-title' }, title) : null, box);
  return { el, box, spec };
}

// Draws the charts of chartCard()s once they are in the document.
export function mountCharts(cards) {
  return cards.map((c) => chart(c.box, c.spec));
}

export function destroyAll(charts) {
  for (const c of charts) {
    try { c.destroy(); } catch (e) { /* already gone */ }
  }
  charts.length = 0;
}
