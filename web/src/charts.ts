// Charts: ECharts (canvas on screen), each in a card with PNG and SVG
// downloads. SVG is rendered by a second, DOM-less instance (ECharts'
// server-side rendering mode), so it is a real vector drawing.

import type { EChartsCoreOption, ECharts } from 'echarts/core';
import { h, download, safeName } from './dom';
import * as fmt from './fmt';

export type Option = EChartsCoreOption;
type EC = typeof import('./ec');

// The chart library is a separate chunk, fetched when the first chart is set.
let ec: EC | null = null;
let ecLoading: Promise<EC> | null = null;
function loadEC(): Promise<EC> {
  if (!ecLoading) ecLoading = import('./ec').then((m) => (ec = m));
  return ecLoading;
}

// clipRect is echarts.graphic.clipRectByRect (for custom series, which only
// render once the library is loaded).
export function clipRect(a: { x: number; y: number; width: number; height: number }, b: { x: number; y: number; width: number; height: number }): unknown {
  return ec!.echarts.graphic.clipRectByRect(a, b);
}

export const roleColor: Record<string, string> = {
  'task-jvm': '#3b6fd4', streaming: '#e8892b', 'streaming-child': '#f2c14e', wrapper: '#9aa3ad', 'app-master': '#8a5cc7',
  executor: '#3a9d5d', child: '#2aa6a6', other: '#c9ced4', unknown: '#7d8791',
};
export const typeColor: Record<string, string> = {
  map: '#3b6fd4', reduce: '#e8892b', am: '#8a5cc7', executor: '#3a9d5d', tez: '#2aa6a6', container: '#7d8791',
};
const palette = ['#3b6fd4', '#e8892b', '#3a9d5d', '#c8423b', '#8a5cc7', '#2aa6a6', '#b8860b', '#d45d9a', '#6b7f99', '#7aa33b'];
export function colorOf(key: string, map: Record<string, string>, i = 0): string {
  return map[key] ?? palette[i % palette.length];
}

export type Fmt = (v: number) => string;

export const axisFmt = {
  bytes: (v: number) => fmt.bytes(v),
  rate: (v: number) => fmt.rate(v),
  pct: (v: number) => fmt.pct(v),
  cores: (v: number) => (v === 0 ? '0' : fmt.cores(v).replace(' cores', '')),
  count: (v: number) => fmt.num(v),
  dur: (v: number) => fmt.dur(v),
};

// tip builds a tooltip as DOM nodes (text only): ECharts' own tooltip
// markup has inline styles, which the CSP refuses, and would carry
// untrusted names as HTML.
export function tip(title: string, rows: [string, string, string?][]): HTMLElement {
  const el = h('div.tip', null, h('div.tip-title', null, title));
  for (const [color, name, value] of rows) {
    const sw = h('span.sw');
    sw.style.background = color;
    el.appendChild(h('div.tip-row', null, sw, h('span.tip-name', null, name), value !== undefined ? h('span.tip-val', null, value) : null));
  }
  return el;
}

// axisTip is a tooltip formatter for time series: the time and each
// series' value, formatted.
export function axisTip(f: Fmt, extra?: (idx: number) => [string, string, string?][], total = false): (p: unknown) => HTMLElement {
  return (p: unknown) => {
    const ps = (Array.isArray(p) ? p : [p]) as { seriesName: string; value: [number, number | null] | number; color: string; dataIndex: number; axisValue?: number }[];
    const t = ps.length ? (Array.isArray(ps[0].value) ? ps[0].value[0] : ps[0].axisValue ?? 0) : 0;
    const rows: [string, string, string?][] = [];
    const sorted = ps.slice(0, 14);
    for (const x of sorted) {
      const v = Array.isArray(x.value) ? x.value[1] : x.value;
      if (v === null || v === undefined) continue;
      rows.push([String(x.color), x.seriesName, f(Number(v))]);
    }
    if (ps.length > 14) rows.push(['transparent', `… ${ps.length - 14} more`, '']);
    if (total && ps.length > 1) {
      let sum = 0;
      for (const x of ps) {
        const v = Array.isArray(x.value) ? x.value[1] : x.value;
        if (typeof v === 'number') sum += v;
      }
      rows.push(['transparent', 'total', f(sum)]);
    }
    if (extra && ps.length) rows.push(...extra(ps[0].dataIndex));
    return tip(fmt.time(Number(t)), rows);
  };
}

export interface CardOptions {
  title: string;
  subtitle?: string; // also written into exported images (e.g. the job id)
  height?: number;
  file: string; // download name without extension
  note?: string;
  wide?: boolean;
  emptyText?: string;
  emptyIfZero?: boolean; // all zeros is no data (IO)
  group?: string; // charts of one group share the pointer and the zoom
}

type Rec = Record<string, unknown>;

function yOf(d: unknown): number | null {
  if (Array.isArray(d)) return typeof d[1] === 'number' ? d[1] : null;
  if (d && typeof d === 'object' && Array.isArray((d as Rec).value)) {
    const v = ((d as Rec).value as unknown[])[1];
    return typeof v === 'number' ? v : null;
  }
  return typeof d === 'number' ? d : null;
}

// hasData says whether any series has a value (limit lines do not count).
function hasData(o: Rec, zeroIsEmpty = false): boolean {
  for (const s of (o.series ?? []) as Rec[]) {
    const data = (s.data ?? []) as unknown[];
    if (s.type === 'custom' || s.type === 'boxplot') {
      if (data.length) return true;
      continue;
    }
    if (data.some((d) => {
      const v = yOf(d);
      return v !== null && (!zeroIsEmpty || v !== 0);
    })) return true;
  }
  return false;
}

// dataMax is the largest value drawn on the first y axis: stacks summed,
// limit lines included.
function dataMax(o: Rec): number {
  let max = 0;
  const stacks = new Map<string, number[]>();
  for (const s of (o.series ?? []) as Rec[]) {
    for (const d of (((s.markLine as Rec | undefined)?.data ?? []) as Rec[])) if (typeof d.yAxis === 'number') max = Math.max(max, d.yAxis);
    if (s.yAxisIndex) continue;
    const data = (s.data ?? []) as unknown[];
    if (s.type === 'boxplot') {
      for (const b of data as number[][]) max = Math.max(max, ...b);
      continue;
    }
    let acc: number[] | undefined;
    if (typeof s.stack === 'string') {
      acc = stacks.get(s.stack);
      if (!acc) stacks.set(s.stack, (acc = []));
    }
    data.forEach((d, i) => {
      const v = yOf(d);
      if (v === null) return;
      if (acc) {
        acc[i] = (acc[i] ?? 0) + v;
        max = Math.max(max, acc[i]);
      } else max = Math.max(max, v);
    });
  }
  return max;
}

// niceBinaryStep picks an axis step in whole binary units: 256 MiB, 1 GiB, 2 GiB.
export function niceBinaryStep(max: number, ticks = 5): number {
  const units = [1, 1024, 1024 ** 2, 1024 ** 3, 1024 ** 4];
  let u = 1;
  for (const x of units) if (max / x >= 1.5) u = x;
  const raw = max / u / ticks;
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * p).find((x) => x >= raw) ?? 10 * p;
  // A quarter of a unit reads better as the smaller unit (256 MiB).
  return u > 1 && step < 1 ? Math.max(1, Math.round(step * 1024)) * (u / 1024) : step * u;
}

// legendRows lets the legend wrap instead of scroll, and makes room for it.
function legendRows(o: Rec, width: number): Rec {
  const lg = o.legend as Rec | undefined;
  const grid = o.grid as Rec | undefined;
  if (!lg || !grid || Array.isArray(grid)) return o;
  const names = ((o.series ?? []) as Rec[]).map((s) => String(s.name ?? '')).filter((n) => n);
  let rows = 1, x = 0;
  const avail = width - 24;
  for (const n of names) {
    const w = 30 + n.length * 6.4;
    if (x + w > avail && x > 0) {
      rows++;
      x = 0;
    }
    x += w;
  }
  lg.type = 'plain';
  grid.top = Math.max(Number(grid.top ?? 40), 14 + rows * 19);
  return o;
}

// finish gives byte axes steps in binary units.
function finish(o: Rec): Rec {
  const ys = Array.isArray(o.yAxis) ? (o.yAxis as Rec[]) : o.yAxis ? [o.yAxis as Rec] : [];
  const y = ys[0];
  if (y && y.bytes) {
    delete y.bytes;
    const max = dataMax(o);
    if (max > 0) {
      const step = niceBinaryStep(max);
      y.interval = step;
      y.max = Math.ceil((max * 1.02) / step) * step;
      y.min = 0;
    }
  }
  return o;
}

// Chart is a chart in a card.
export class Chart {
  card: HTMLElement;
  body: HTMLElement;
  inst: ECharts | null = null;
  private seq = 0;
  private build: (() => Option) | null = null;
  private ro: ResizeObserver | null = null;
  private noteEl: HTMLElement;
  onClick: ((p: unknown) => void) | null = null;
  onZoom: ((startPct: number, endPct: number) => void) | null = null;

  constructor(parent: HTMLElement, public o: CardOptions) {
    this.body = h('div.chart-body', { role: 'img', 'aria-label': o.title });
    this.body.style.height = (o.height ?? 220) + 'px';
    const png = h('button.small', { type: 'button', title: 'Download as PNG', 'data-dl': 'png' }, 'PNG');
    const svg = h('button.small', { type: 'button', title: 'Download as SVG', 'data-dl': 'svg' }, 'SVG');
    png.addEventListener('click', () => this.downloadPNG());
    svg.addEventListener('click', () => this.downloadSVG());
    this.noteEl = h('div.chart-note', null, o.note ?? '');
    this.card = h('section.card.chart' + (o.wide ? '.wide' : ''), { 'data-chart': o.file },
      h('div.card-head', null, h('h3', null, o.title), h('span.spacer'), png, svg), this.body, this.noteEl);
    parent.appendChild(this.card);
  }

  width(): number {
    return Math.max(100, this.body.clientWidth || this.card.clientWidth || 600);
  }

  // points is the point budget to ask the server for: about one per pixel.
  points(): number {
    return Math.min(5000, Math.max(60, Math.round(this.width())));
  }

  note(text: string): void {
    this.noteEl.textContent = text;
  }

  // set draws the chart that build describes (again, on live updates).
  set(build: () => Option): void {
    const my = ++this.seq;
    if (ec) this.draw(build);
    else void loadEC().then(() => my === this.seq && this.draw(build));
  }

  private draw(build: () => Option): void {
    const echarts = ec!.echarts;
    const built = () => legendRows(finish(build() as Record<string, unknown>), this.width());
    this.build = built;
    const opt = built();
    if (!hasData(opt as Record<string, unknown>, this.o.emptyIfZero)) {
      this.empty(this.o.emptyText ?? 'no data for this chart');
      return;
    }
    if (this.card.hasAttribute('data-empty')) {
      this.card.removeAttribute('data-empty');
      this.body.textContent = '';
    }
    if (!this.inst) {
      this.inst = echarts.init(this.body, null, { renderer: 'canvas' });
      this.inst.on('click', (p) => this.onClick?.(p));
      let zt = 0;
      this.inst.on('datazoom', () => {
        clearTimeout(zt);
        zt = window.setTimeout(() => {
          const dz = (this.inst?.getOption() as { dataZoom?: { start: number; end: number }[] } | undefined)?.dataZoom;
          if (dz && dz.length && this.onZoom) this.onZoom(dz[0].start, dz[0].end);
        }, 300);
      });
      this.ro = new ResizeObserver(() => this.inst?.resize());
      this.ro.observe(this.body);
      this.inst.setOption(opt);
      if (this.o.group) {
        this.inst.group = this.o.group;
        echarts.connect(this.o.group);
      }
    } else {
      this.inst.setOption(opt, { notMerge: false, replaceMerge: ['series'] });
    }
    this.body.setAttribute('data-drawn', '1');
  }

  empty(text: string): void {
    this.seq++;
    this.dispose();
    this.build = null;
    this.body.textContent = '';
    this.body.appendChild(h('div.chart-empty', null, text));
    this.card.setAttribute('data-empty', '1');
  }

  private exportOption(): Option {
    const opt = this.build!() as Record<string, unknown>;
    opt.animation = false;
    opt.title = { text: this.o.title, subtext: this.o.subtitle ?? '', left: 8, top: 8, textStyle: { fontSize: 13, fontWeight: 600 }, subtextStyle: { fontSize: 11 }, itemGap: 2 };
    const grid = (opt.grid ?? {}) as Record<string, unknown>;
    if (!Array.isArray(grid)) opt.grid = { ...grid, top: Number(grid.top ?? 40) + 44 };
    const lg = opt.legend as Record<string, unknown> | undefined;
    if (lg) opt.legend = { ...lg, top: Number(lg.top ?? 6) + 44 };
    delete opt.dataZoom;
    opt.backgroundColor = '#ffffff';
    return opt;
  }

  downloadPNG(): void {
    if (!this.build || !ec) return;
    const echarts = ec.echarts;
    const w = this.width(), hgt = this.body.clientHeight || 220;
    const div = h('div.offscreen');
    div.style.width = w + 'px';
    div.style.height = hgt + 48 + 'px';
    document.body.appendChild(div);
    const inst = echarts.init(div, null, { renderer: 'canvas', width: w, height: hgt + 48, devicePixelRatio: 2 });
    inst.setOption(this.exportOption());
    const url = inst.getDataURL({ type: 'png', pixelRatio: 2, backgroundColor: '#ffffff' });
    inst.dispose();
    div.remove();
    const bin = atob(url.slice(url.indexOf(',') + 1));
    const buf = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) buf[i] = bin.charCodeAt(i);
    download(safeName(this.o.file) + '.png', new Blob([buf], { type: 'image/png' }));
  }

  downloadSVG(): void {
    if (!this.build || !ec) return;
    const echarts = ec.echarts;
    const w = this.width(), hgt = (this.body.clientHeight || 220) + 48;
    const inst = echarts.init(null, null, { renderer: 'svg', ssr: true, width: w, height: hgt });
    inst.setOption(this.exportOption());
    const svg = inst.renderToSVGString();
    inst.dispose();
    download(safeName(this.o.file) + '.svg', new Blob([svg], { type: 'image/svg+xml' }));
  }

  dispose(): void {
    this.ro?.disconnect();
    this.ro = null;
    this.inst?.dispose();
    this.inst = null;
    this.body.removeAttribute('data-drawn');
  }
}

// timeOption is the common frame of a time-series chart.
export function timeOption(yFmt: Fmt, from: number, to: number, opts: { legend?: boolean; yMax?: number; stack?: boolean } = {}): Record<string, unknown> {
  return {
    animation: false,
    grid: { left: 64, right: 16, top: opts.legend === false ? 16 : 40, bottom: 28 },
    legend: opts.legend === false ? undefined : { type: 'scroll', top: 6, left: 8, right: 8, itemWidth: 14, itemHeight: 8, textStyle: { fontSize: 11 } },
    tooltip: { trigger: 'axis', confine: true, formatter: axisTip(yFmt), axisPointer: { type: 'line' } },
    xAxis: { type: 'time', min: from, max: to, axisLabel: { fontSize: 10, hideOverlap: true }, splitLine: { show: false } },
    yAxis: { type: 'value', max: opts.yMax, bytes: yFmt === axisFmt.bytes || yFmt === axisFmt.rate, axisLabel: { formatter: (v: number) => yFmt(v), fontSize: 10 }, splitLine: { lineStyle: { color: '#eef0f3' } } },
    dataZoom: [{ type: 'inside', xAxisIndex: 0, filterMode: 'none' }],
  };
}

// pairs zips times and values for a series, leaving gaps as null.
export function pairs(times: number[], values: (number | null)[], scale = 1): [number, number | null][] {
  const out: [number, number | null][] = new Array(times.length);
  for (let i = 0; i < times.length; i++) {
    const v = values[i];
    out[i] = [times[i], v === null || v === undefined ? null : v * scale];
  }
  return out;
}

export function lineSeries(name: string, data: [number, number | null][], color: string, opts: { area?: boolean; stack?: string; step?: boolean; dashed?: boolean; width?: number } = {}): Record<string, unknown> {
  return {
    type: 'line', name, data, showSymbol: false, symbol: 'none', connectNulls: false, stack: opts.stack, step: opts.step ? 'end' : undefined,
    lineStyle: { width: opts.width ?? 1.5, color, type: opts.dashed ? 'dashed' : 'solid' }, itemStyle: { color },
    areaStyle: opts.area || opts.stack ? { opacity: opts.stack ? 0.55 : 0.15, color } : undefined,
    emphasis: { disabled: true }, sampling: undefined,
  };
}

export function limitLine(name: string, value: number, label: string, color = '#c8423b'): Record<string, unknown> {
  return {
    type: 'line', name, data: [], markLine: {
      silent: true, symbol: 'none', lineStyle: { color, type: 'dashed', width: 1.5 },
      label: { formatter: label, position: 'insideEndTop', color, fontSize: 11 }, data: [{ yAxis: value }],
    },
  };
}

// lastData is the time after the last bucket that has a value in any of
// the series (a running thing's chart ends there, not at now).
export function lastData(times: number[], step: number, ...values: (number | null)[][]): number {
  for (let i = times.length - 1; i >= 0; i--) if (values.some((v) => v[i] !== null && v[i] !== undefined)) return times[i] + step;
  return times.length ? times[times.length - 1] + step : 0;
}

// fillGaps carries a sparsely sampled gauge (PSS) from each sample to the
// next, and past the last one while alive (a gauge read every tick, such
// as RSS) says the process still runs.
export function fillGaps(v: (number | null)[], alive?: (number | null)[]): (number | null)[] {
  const out = v.slice();
  let last: number | null = null;
  for (let i = 0; i < out.length; i++) {
    if (out[i] !== null) last = out[i];
    else if (last !== null && (!alive || (alive[i] !== null && alive[i] !== undefined))) out[i] = last;
    else if (alive) last = null;
  }
  return out;
}
