// A recurring job's page: its runs (the same name with dates and numbers
// normalized, the same user and queue), the trend of each measure with the
// band the last run is judged against, and the runs, those outside their
// band marked.
import { h } from '../dom';
import * as fmt from '../fmt';
import { get, History, Run, ms, enc, jobURL } from '../api';
import { Ctx, navigate } from '../nav';
import { Chart, Option, tip, axisFmt } from '../charts';
import { grid, section, stateBadge } from './common';

interface Measure { id: string; title: string; value: (r: Run) => number; f: (v: number) => string; axis: (v: number) => string; bytes?: boolean }

const measures: Measure[] = [
  { id: 'duration', title: 'Duration', value: (r) => r.duration_s * 1000, f: fmt.dur, axis: (v) => fmt.dur(v) },
  { id: 'cpu', title: 'CPU time', value: (r) => r.cpu_s * 1000, f: fmt.dur, axis: (v) => fmt.dur(v) },
  { id: 'peak_memory', title: 'Peak memory (largest attempt)', value: (r) => r.peak_rss_bytes, f: fmt.bytes, axis: axisFmt.bytes, bytes: true },
  { id: 'gc', title: 'GC share of runnable time', value: (r) => r.gc_percent, f: (v) => fmt.pct(v, 1), axis: (v) => fmt.pct(v) },
  { id: 'io', title: 'IO (read and written)', value: (r) => r.io_bytes, f: fmt.bytes, axis: axisFmt.bytes, bytes: true },
];

// A band's median and limit are in the API's units (s, bytes, percent):
// to the chart's (ms for times).
function bandScale(id: string): number {
  return id === 'duration' || id === 'cpu' ? 1000 : 1;
}

// roundUp rounds an axis maximum up to a round number (1, 2 or 5 × a power of ten).
function roundUp(x: number): number {
  if (x <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  for (const k of [1, 2, 5, 10]) if (k * p >= x) return k * p;
  return 10 * p;
}

export async function historyPage(c: Ctx): Promise<void> {
  const jobID = c.params[0];
  const root = c.root;
  const hist = await get<History>('/api/v1/jobs/' + enc(jobID) + '/history?runs=60', c.signal);
  const runs = hist.runs ?? [];
  document.title = `${hist.name} · runs · taskscope`;
  root.append(h('div.crumbs', null, h('a', { href: '/jobs' }, 'Jobs'), ' / ', h('a', { href: jobURL(jobID) }, jobID), ' / runs'),
    h('div.page-head', null, h('h1', null, 'Recurring job ', h('span.mono', null, hist.name)),
      h('span.sub', null, `user ${hist.user} · queue ${hist.queue} · ${runs.length} runs`)));
  const bands = new Map((hist.median ?? []).map((b) => [b.measure, b]));
  const info = section(root, 'How runs are compared');
  info.setAttribute('data-section', 'band');
  info.appendChild(h('p.muted', null, hist.baseline_runs
    ? `Each run against the median of the (up to 10) runs before it: outside its band when a measure is more than 25 % above that median and by an amount that matters (duration: 5 minutes; CPU: 10 minutes; memory: 256 MB; GC: 5 points; IO: 1 GB). The dashed line is the limit for ${jobID}, from its ${hist.baseline_runs} earlier runs.`
    : `No earlier runs of this job were found (the same name with dates and numbers normalized, by ${hist.user} in ${hist.queue}).`));

  const g = grid(root, 'two');
  const charts: Chart[] = [];
  c.onCleanup(() => charts.forEach((x) => x.dispose()));
  const labels = runs.map((r) => fmt.shortTime(ms(r.start)));
  for (const m of measures) {
    const ch = new Chart(g, { title: m.title, subtitle: hist.name, file: `${jobID}-runs-${m.id}`, height: 200, note: 'one point per run, red where the run was outside its band; click a point to open the run' });
    charts.push(ch);
    ch.onClick = (p: unknown) => {
      const i = (p as { dataIndex?: number }).dataIndex;
      if (i !== undefined && runs[i]) navigate(jobURL(runs[i].job_id));
    };
    const b = bands.get(m.id);
    const option = (): Option => ({
      animation: false,
      grid: { left: 70, right: 16, top: 20, bottom: 40 },
      tooltip: {
        trigger: 'item', confine: true, formatter: (p: { dataIndex: number }) => {
          const r = runs[p.dataIndex];
          return tip(r.job_id, [['transparent', 'started', fmt.time(ms(r.start))], ['transparent', m.title, m.f(m.value(r))],
            ['transparent', 'outside its band', (r.outside ?? []).join(', ') || 'no']]);
        },
      },
      xAxis: { type: 'category', data: labels, axisLabel: { fontSize: 10, hideOverlap: true } },
      // The band's limit is drawn even above the runs (byte axes: the
      // chart helper sizes them from the data and the lines).
      yAxis: { type: 'value', min: 0, bytes: m.bytes, max: !m.bytes && b ? (v: { max: number }) => roundUp(Math.max(v.max, b.limit * bandScale(m.id) * 1.08)) : undefined,
        axisLabel: { formatter: m.axis, fontSize: 10 }, splitLine: { lineStyle: { color: '#eef0f3' } } },
      series: [{
        type: 'line', name: m.title, data: runs.map((r, i) => ({ value: [i, m.value(r)], itemStyle: { color: (r.outside ?? []).includes(m.id) ? '#c8423b' : '#2f62c9' }, symbolSize: (r.outside ?? []).includes(m.id) ? 9 : 6 })),
        lineStyle: { color: '#2f62c9', width: 1.5 }, showSymbol: true,
        markLine: b ? {
          silent: true, symbol: 'none', label: { fontSize: 10, position: 'insideEndTop' },
          data: [{ yAxis: b.median * bandScale(m.id), lineStyle: { color: '#6b7483', type: 'dotted' }, label: { formatter: 'median ' + m.f(b.median * bandScale(m.id)) } },
            { yAxis: b.limit * bandScale(m.id), lineStyle: { color: '#c8423b', type: 'dashed' }, label: { formatter: 'limit ' + m.f(b.limit * bandScale(m.id)), color: '#c8423b' } }],
        } : undefined,
      }],
    });
    if (runs.length) ch.set(option);
    else ch.empty('no runs');
  }

  const card = section(root, 'Runs');
  const t = h('table', { 'data-table': 'runs' });
  t.appendChild(h('thead', null, h('tr', null, ...['job', 'state', 'start', 'duration', 'CPU', 'peak memory', 'GC', 'IO', 'outside its band'].map((x) => h('th', null, x)))));
  const tb = h('tbody');
  for (const r of [...runs].reverse()) {
    const out = new Set(r.outside ?? []);
    const cell = (id: string, text: string) => h('td.num', { class: out.has(id) ? 'warn' : null }, text);
    tb.appendChild(h('tr', { 'data-job': r.job_id, class: r.job_id === jobID ? 'current' : null },
      h('td.mono', null, h('a', { href: jobURL(r.job_id) }, r.job_id)), h('td', null, stateBadge(r.state)), h('td', null, fmt.time(ms(r.start))),
      cell('duration', fmt.dur(r.duration_s * 1000)), cell('cpu', fmt.dur(r.cpu_s * 1000)), cell('peak_memory', fmt.bytes(r.peak_rss_bytes)),
      cell('gc', fmt.pct(r.gc_percent, 1)), cell('io', fmt.bytes(r.io_bytes)), h('td', { 'data-outside': [...out].join(',') }, [...out].join(', ') || '–')));
  }
  t.appendChild(tb);
  card.appendChild(h('div.scroll-x', null, t));
}
