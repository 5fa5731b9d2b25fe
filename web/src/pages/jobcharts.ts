// The job page's charts: the timeline of attempts per host, the job's CPU
// and memory over time, and the distributions per task type.
import * as fmt from '../fmt';
import { Attempt, Series, seriesValues, attemptURL } from '../api';
import { Chart, Option, axisFmt, axisTip, colorOf, lineSeries, pairs, timeOption, tip, typeColor, clipRect } from '../charts';
import { navigate } from '../nav';
import { cpuText, lanes, outcomeText } from './common';

// failedOutcome: the outcomes outlined in red on the timeline.
function failedOutcome(o: string | undefined): boolean {
  return o === 'failed' || o === 'killed' || o === 'killed_memory' || o === 'lost';
}
import { box } from '../stats';

// timeline draws attempts as bars, one row per host (lanes inside a row
// for attempts that overlap), coloured by task type.
// opts.critical are the attempts of the critical path (outlined in black,
// joined by a line in their order); opts.marks vertical lines with a label
// (the start of each task type's last wave); opts.colors the colours of
// colorKey's values (default: by task type).
export function timelineOption(atts: Attempt[], from: number, to: number, opts: { rowKey?: (a: Attempt) => string; colorKey?: (a: Attempt) => string; colors?: Record<string, string>; label?: string; critical?: string[]; marks?: { t: number; label: string }[] } = {}): { option: () => Option; rows: number } {
  const critical = new Set(opts.critical ?? []);
  const rowKey = opts.rowKey ?? ((a: Attempt) => a.host);
  const colorKey = opts.colorKey ?? ((a: Attempt) => a.type);
  const colors = opts.colors ?? typeColor;
  const rows = [...new Set(atts.map(rowKey))].sort();
  const rowIdx = new Map(rows.map((r, i) => [r, i]));
  const perRow = new Map<string, number[]>();
  atts.forEach((a, i) => {
    const k = rowKey(a);
    let l = perRow.get(k);
    if (!l) perRow.set(k, (l = []));
    l.push(i);
  });
  const laneOf = new Array<number>(atts.length);
  const laneCount = new Array<number>(atts.length);
  for (const idx of perRow.values()) {
    const { lane, count } = lanes(idx.map((i) => ({ t0: atts[i].t0!, t1: Math.max(atts[i].t1!, atts[i].t0! + 1) })));
    idx.forEach((i, j) => {
      laneOf[i] = lane[j];
      laneCount[i] = count;
    });
  }
  const keys = [...new Set(atts.map(colorKey))].sort();
  const series = keys.map((k, ki) => {
    const data: number[][] = [];
    atts.forEach((a, i) => {
      if (colorKey(a) === k) data.push([rowIdx.get(rowKey(a))!, a.t0!, Math.max(a.t1!, a.t0! + 500), laneOf[i], laneCount[i], i, a.state === 'lost' || failedOutcome(a.outcome) ? 1 : 0, critical.has(a.attempt_id) ? 1 : 0]);
    });
    const color = colorOf(k, colors, ki);
    return {
      type: 'custom', name: k, data, encode: { x: [1, 2], y: 0 }, itemStyle: { color },
      renderItem: (params: { coordSys: { x: number; y: number; width: number; height: number } }, api: { value: (i: number) => number; coord: (v: number[]) => number[]; size: (v: number[]) => number[] }) => {
        const r = api.value(0);
        const s = api.coord([api.value(1), r]), e = api.coord([api.value(2), r]);
        const band = api.size([0, 1])[1];
        const n = api.value(4), l = api.value(3);
        const lh = (band * 0.86) / n;
        const y = s[1] - band * 0.43 + l * lh;
        const cs = params.coordSys;
        const shape = clipRect({ x: s[0], y, width: Math.max(1.5, e[0] - s[0]), height: Math.max(1, lh - (lh > 3 ? 1 : 0)) }, { x: cs.x, y: cs.y, width: cs.width, height: cs.height });
        // A hairline between consecutive bars (Tez and JVM reuse run attempts back to back).
        const sh = shape as { width: number } | undefined;
        // The critical path's attempts are outlined in black; failed,
        // killed and lost ones in red.
        if (sh && api.value(7)) return { type: 'rect', shape: sh, style: { fill: color, stroke: '#16181d', lineWidth: 2.5 } };
        if (sh && api.value(6)) return { type: 'rect', shape: sh, style: { fill: color, stroke: '#c8423b', lineWidth: 1.5 } };
        return sh && { type: 'rect', shape: sh, style: sh.width > 4 ? { fill: color, stroke: '#fff', lineWidth: 0.6 } : { fill: color } };
      },
    };
  });
  // The critical path: a line through its attempts' ends, in order.
  const pathData: [number, number][] = [];
  if (critical.size) {
    const idx = new Map(atts.map((a, i) => [a.attempt_id, i]));
    for (const id of opts.critical ?? []) {
      const i = idx.get(id);
      if (i === undefined) continue;
      const a = atts[i];
      pathData.push([a.t0!, rowIdx.get(rowKey(a))!], [Math.max(a.t1!, a.t0! + 500), rowIdx.get(rowKey(a))!]);
    }
  }
  const extra: Record<string, unknown>[] = [];
  if (pathData.length || opts.marks?.length) {
    extra.push({
      type: 'line', name: 'critical path', data: pathData, showSymbol: false, silent: true, z: 5,
      lineStyle: { color: '#16181d', width: 1.5, type: 'dashed' }, itemStyle: { color: '#16181d' },
      markLine: opts.marks?.length ? {
        silent: true, symbol: 'none', lineStyle: { color: '#8a5a00', type: 'dotted', width: 1.2 },
        label: { position: 'insideEndTop', fontSize: 10, color: '#8a5a00' },
        data: opts.marks.map((m) => ({ xAxis: m.t, label: { formatter: m.label } })),
      } : undefined,
    });
  }
  const option = (): Option => ({
    animation: false,
    grid: { left: 110, right: rows.length > 40 ? 36 : 16, top: 34, bottom: 28 },
    legend: { top: 6, left: 110, itemWidth: 14, itemHeight: 8, textStyle: { fontSize: 11 } },
    tooltip: {
      trigger: 'item', confine: true, formatter: (p: { value: number[]; color: string; seriesType?: string }) => {
        const a = p.seriesType === 'custom' ? atts[p.value[5]] : undefined;
        if (!a) return '';
        const rows: [string, string, string?][] = [[p.color, a.type + ' · ' + a.state, a.host], ['transparent', 'start', fmt.time(a.t0)], ['transparent', 'duration', fmt.dur(a.duration_ms)],
          ['transparent', 'CPU', cpuText(a)], ['transparent', 'peak RSS', fmt.bytes(a.peak_rss_bytes)]];
        if (a.outcome) rows.push(['transparent', 'outcome', outcomeText(a.outcome) + (a.exit_code != null ? ' (exit ' + a.exit_code + ')' : '')]);
        if (a.retry_of) rows.push(['transparent', a.speculative ? 'speculative copy of' : 'retry of', a.retry_of]);
        return tip(a.attempt_id, rows);
      },
    },
    xAxis: { type: 'time', min: from, max: to, axisLabel: { fontSize: 10, hideOverlap: true }, splitLine: { show: true, lineStyle: { color: '#f0f1f4' } } },
    yAxis: { type: 'category', data: rows, inverse: true, axisLabel: { fontSize: 10, formatter: (v: string) => (v.length > 17 ? '…' + v.slice(-16) : v) }, axisTick: { show: false }, splitLine: { show: true, lineStyle: { color: '#f0f1f4' } } },
    dataZoom: [{ type: 'inside', xAxisIndex: 0, filterMode: 'weakFilter' }, ...(rows.length > 40 ? [{ type: 'slider', yAxisIndex: 0, width: 14, right: 6, startValue: 0, endValue: 39, filterMode: 'weakFilter', showDetail: false }] : [])],
    series: [...series, ...extra],
  });
  return { option, rows: rows.length };
}

export function attachAttemptClick(ch: Chart, atts: Attempt[]): void {
  ch.onClick = (p: unknown) => {
    const v = (p as { value?: number[]; data?: { id?: string } }).value;
    const a = Array.isArray(v) && v.length >= 6 ? atts[v[5]] : null;
    if (a) navigate(attemptURL(a.job_id, a.attempt_id));
  };
}

// allocated sums, per bucket, the memory.mb of the attempts that ran then.
export function allocated(atts: Attempt[], s: Series): number[] {
  const n = s.times.length;
  const diff = new Float64Array(n + 1);
  for (const a of atts) {
    if (!a.memory_mb) continue;
    const i0 = Math.max(0, Math.floor((a.t0! - s.from_ms) / s.step_ms));
    const i1 = Math.min(n - 1, Math.floor((a.t1! - s.from_ms) / s.step_ms));
    if (i1 < i0 || i0 >= n) continue;
    diff[i0] += a.memory_mb * 1024 * 1024;
    diff[i1 + 1] -= a.memory_mb * 1024 * 1024;
  }
  const out: number[] = new Array(n);
  let acc = 0;
  for (let i = 0; i < n; i++) {
    acc += diff[i];
    out[i] = acc;
  }
  return out;
}

export function cpuOption(s: Series, win: [number, number]): Option {
  const o = timeOption(axisFmt.cores, win[0], win[1], { legend: false }) as Record<string, unknown>;
  o.tooltip = { trigger: 'axis', confine: true, formatter: axisTip((v) => fmt.cores(v)) };
  o.series = [lineSeries('CPU', pairs(s.times, seriesValues(s, 'cpu_percent')), '#3b6fd4', { area: true })];
  return o;
}

export function memOption(s: Series, atts: Attempt[], win: [number, number]): Option {
  const o = timeOption(axisFmt.bytes, win[0], win[1]) as Record<string, unknown>;
  o.tooltip = { trigger: 'axis', confine: true, formatter: axisTip((v) => fmt.bytes(v)) };
  const alloc = allocated(atts, s);
  o.series = [
    ...(alloc.some((v) => v > 0) ? [lineSeries('allocated (memory.mb)', s.times.map((t, i) => [t, alloc[i]] as [number, number]), '#c8423b', { dashed: true, step: true })] : []),
    lineSeries('RSS', pairs(s.times, seriesValues(s, 'rss_bytes')), '#3b6fd4', { area: true }),
    lineSeries('PSS', pairs(s.times, seriesValues(s, 'pss_bytes')), '#3a9d5d'),
    lineSeries('JVM heap used', pairs(s.times, seriesValues(s, 'heap_used_bytes')), '#8a5cc7', { width: 1 }),
  ];
  return o;
}

export function attemptsOption(s: Series, win: [number, number]): Option {
  const o = timeOption(axisFmt.count, win[0], win[1], { legend: false }) as Record<string, unknown>;
  o.tooltip = { trigger: 'axis', confine: true, formatter: axisTip((v) => fmt.num(v) + ' attempts') };
  o.series = [lineSeries('attempts running', pairs(s.times, seriesValues(s, 'attempts')), '#e8892b', { area: true, step: true })];
  (o.yAxis as Record<string, unknown>).minInterval = 1;
  return o;
}

export function ioOption(s: Series, win: [number, number]): Option {
  const o = timeOption(axisFmt.rate, win[0], win[1]) as Record<string, unknown>;
  o.tooltip = { trigger: 'axis', confine: true, formatter: axisTip((v) => fmt.rate(v)) };
  o.series = [
    lineSeries('read', pairs(s.times, seriesValues(s, 'read_bytes_per_s')), '#2aa6a6', { area: true }),
    lineSeries('written', pairs(s.times, seriesValues(s, 'write_bytes_per_s')), '#d45d9a', { area: true }),
  ];
  return o;
}

// distOption is a box plot per task type of one attempt figure, with each
// attempt as a point beside it (or only the outliers, for many attempts):
// a straggler or a skewed reducer stands out at once.
export function distOption(atts: Attempt[], value: (a: Attempt) => number, f: (v: number) => string, name: string): Option {
  const order = ['map', 'reduce', 'tez', 'executor', 'am'];
  const types = [...new Set(atts.map((a) => a.type))].sort((a, b) => ((order.indexOf(a) + 10) % 15) - ((order.indexOf(b) + 10) % 15) || a.localeCompare(b));
  const boxes: number[][] = [];
  const points: { value: [number, number, number]; itemStyle?: unknown }[] = [];
  const all = atts.length <= 3000;
  types.forEach((t, ti) => {
    const idx: number[] = [];
    atts.forEach((a, i) => {
      if (a.type === t) idx.push(i);
    });
    const b = box(idx.map((i) => value(atts[i])));
    boxes.push([b.lo, b.q1, b.median, b.q3, b.hi]);
    for (const i of idx) {
      const v = value(atts[i]);
      const out = v > b.hi || v < b.lo;
      if (all || out) {
        // Deterministic jitter so that points of one type do not sit on one line.
        const j = (((i * 2654435761) >>> 0) % 1000) / 1000 - 0.5;
        points.push({ value: [ti + 0.3 + j * 0.18, v, i], itemStyle: out ? { color: '#c8423b', opacity: 0.95 } : undefined });
      }
    }
  });
  return {
    animation: false,
    grid: { left: 64, right: 12, top: 14, bottom: 26 },
    tooltip: {
      trigger: 'item', confine: true, formatter: (p: { seriesType: string; value: number[]; dataIndex: number; color: string }) => {
        if (p.seriesType === 'boxplot') {
          const [, lo, q1, med, q3, hi] = p.value;
          const t = types[p.dataIndex];
          const n = atts.filter((a) => a.type === t).length;
          return tip(`${t}: ${name} (${n} attempts)`, [['transparent', 'upper whisker', f(hi)], ['transparent', 'Q3', f(q3)], ['transparent', 'median', f(med)], ['transparent', 'Q1', f(q1)], ['transparent', 'lower whisker', f(lo)]]);
        }
        const a = atts[p.value[2]];
        return tip(a.attempt_id, [[String(p.color), name, f(p.value[1])], ['transparent', 'host', a.host], ['transparent', 'duration', fmt.dur(a.duration_ms)]]);
      },
    },
    xAxis: { type: 'category', data: types, axisLabel: { fontSize: 11 }, axisTick: { alignWithLabel: true } },
    yAxis: { type: 'value', scale: false, bytes: f === fmt.bytes, axisLine: { show: false, onZero: false }, axisLabel: { formatter: (v: number) => f(v), fontSize: 10 }, splitLine: { lineStyle: { color: '#eef0f3' } } },
    series: [
      { type: 'boxplot', name, data: boxes, boxWidth: [8, 36], itemStyle: { color: '#e6ecf8', borderColor: '#3b6fd4', borderWidth: 1.2 } },
      { type: 'scatter', name: 'attempts', data: points, symbolSize: all ? 4 : 6, itemStyle: { color: '#6b7f99', opacity: 0.55 }, large: points.length > 2000, xAxisIndex: 0 },
    ],
  };
}

// distXAxisForScatter: the scatter uses numeric x over the category axis.
export function fixDistAxes(o: Option): Option {
  const x = (o as Record<string, unknown>).xAxis as Record<string, unknown>;
  (o as Record<string, unknown>).xAxis = [x, { type: 'value', min: -0.5, max: (x.data as string[]).length - 0.5, show: false, axisLine: { onZero: false } }];
  const s = (o as Record<string, unknown>).series as Record<string, unknown>[];
  s[1].xAxisIndex = 1;
  return o;
}
