// The cost of waste: CPU-hours and memory GB-hours allocated and used, and
// what went to failed, killed and speculative attempts and to
// over-allocation, by user, queue, job or day.
import { h, clear } from '../dom';
import * as fmt from '../fmt';
import { get, WasteReport, WasteGroup, WasteAmount, enc, jobURL } from '../api';
import { Ctx, navigate } from '../nav';
import { Chart, Option, tip } from '../charts';
import { figure, grid, section } from './common';

const windows: [string, string][] = [['-24h', 'last 24 hours'], ['-168h', 'last 7 days'], ['-720h', 'last 30 days']];
const kinds: [keyof WasteGroup, string, string][] = [['failed', 'failed', '#c8423b'], ['killed', 'killed', '#e8892b'], ['speculative', 'speculative', '#b48ae6'], ['over_allocated', 'over-allocated', '#9aa8bd']];

function amount(g: WasteGroup, k: keyof WasteGroup): WasteAmount {
  return g[k] as WasteAmount;
}

export async function wastePage(c: Ctx): Promise<void> {
  const root = c.root;
  const q = c.query;
  document.title = 'Waste · taskscope';
  const by = h('select', { 'aria-label': 'Group by', 'data-f': 'by' }, ...['user', 'queue', 'job', 'day'].map((v) => h('option', { value: v }, 'by ' + v)));
  by.value = q.get('by') ?? 'user';
  const win = h('select', { 'aria-label': 'Time window', 'data-f': 'from' }, ...windows.map(([v, t]) => h('option', { value: v }, t)));
  win.value = q.get('from') ?? '-168h';
  const user = h('input', { type: 'search', placeholder: 'user', 'aria-label': 'User', value: q.get('user') ?? '', 'data-f': 'user', size: 10 });
  const queue = h('input', { type: 'search', placeholder: 'queue', 'aria-label': 'Queue', value: q.get('queue') ?? '', 'data-f': 'queue', size: 10 });
  const bar = h('form.filters', null, by, win, user, queue);
  bar.addEventListener('submit', (e) => e.preventDefault());
  root.append(h('div.page-head', null, h('h1', null, 'Waste'), h('span.sub', null, 'what failed, killed and speculative attempts and over-allocation cost')), bar);
  const update = (): void => {
    const p = new URLSearchParams();
    p.set('by', by.value);
    p.set('from', win.value);
    if (user.value.trim()) p.set('user', user.value.trim());
    if (queue.value.trim()) p.set('queue', queue.value.trim());
    navigate('/waste?' + p.toString(), true);
  };
  for (const el of [by, win]) el.addEventListener('change', update);
  for (const el of [user, queue]) el.addEventListener('change', update);

  const params = new URLSearchParams({ by: by.value, from: win.value });
  if (user.value) params.set('user', user.value);
  if (queue.value) params.set('queue', queue.value);
  const r = await get<WasteReport>('/api/v1/waste?' + params.toString(), c.signal);
  const groups = r.groups ?? [];
  const t = r.total;
  const totals = h('section.card', { 'data-section': 'waste-total' });
  const wasted = (x: { failed: WasteAmount; killed: WasteAmount; speculative: WasteAmount }, f: (a: WasteAmount) => number) => f(x.failed) + f(x.killed) + f(x.speculative);
  totals.append(h('div.figs', null,
    figure('jobs', fmt.num(r.jobs), r.truncated ? 'the first of more' : fmt.shortTime(Date.parse(r.from ?? '')) + ' – ' + fmt.shortTime(Date.parse(r.to ?? ''))),
    figure('CPU allocated', t.cpu_hours.toFixed(2) + ' core-h', t.used_cpu_hours.toFixed(2) + ' used', 'a core per container (YARN default); used: CPU time of the processes'),
    figure('memory allocated', fmt.gbh(t.memory_gb_hours), fmt.gbh(t.used_memory_gb_hours) + ' used'),
    figure('thrown away', fmt.pct(t.wasted_percent, 1), `${wasted(t, (a) => a.attempts)} attempts: ${wasted(t, (a) => a.cpu_hours).toFixed(2)} core-h, ${fmt.gbh(wasted(t, (a) => a.memory_gb_hours))}`, 'what failed, killed and speculative attempts were given, of all allocated'),
    figure('over-allocated', t.over_allocated.cpu_hours.toFixed(2) + ' core-h', fmt.gbh(t.over_allocated.memory_gb_hours), 'allocated beyond what the other attempts used')));
  root.appendChild(totals);

  const g = grid(root, 'two');
  const shown = groups.slice(0, 30);
  const keys = shown.map((x) => x.key || '–');
  const mk = (title: string, file: string, f: (a: WasteAmount) => number, unit: (v: number) => string): Chart => {
    const ch = new Chart(g, { title, subtitle: 'by ' + r.by, file, height: Math.max(160, 40 + shown.length * 22), note: r.by === 'job' ? 'click a bar to open the job' : '' });
    c.onCleanup(() => ch.dispose());
    ch.onClick = (p: unknown) => {
      const i = (p as { dataIndex?: number }).dataIndex;
      if (r.by === 'job' && i !== undefined && shown[i]) navigate(jobURL(shown[i].key));
    };
    const option = (): Option => ({
      animation: false,
      grid: { left: 120, right: 20, top: 30, bottom: 24 },
      legend: { top: 4, left: 120, itemWidth: 14, itemHeight: 8, textStyle: { fontSize: 11 } },
      tooltip: {
        trigger: 'axis', axisPointer: { type: 'shadow' }, confine: true, formatter: (ps: { dataIndex: number }[]) => {
          const x = shown[ps[0].dataIndex];
          return tip(x.key || '–', kinds.map(([k, name, color]) => [color, name, `${amount(x, k).attempts ? amount(x, k).attempts + ' att. · ' : ''}${unit(f(amount(x, k)))}`] as [string, string, string]));
        },
      },
      xAxis: { type: 'value', axisLabel: { formatter: unit, fontSize: 10 }, splitLine: { lineStyle: { color: '#eef0f3' } } },
      yAxis: { type: 'category', data: keys, inverse: true, axisLabel: { fontSize: 10, formatter: (v: string) => (v.length > 18 ? '…' + v.slice(-17) : v) } },
      series: kinds.map(([k, name, color]) => ({ type: 'bar', name, stack: 'w', data: shown.map((x) => f(amount(x, k))), itemStyle: { color }, barMaxWidth: 18 })),
    });
    if (shown.length) ch.set(option);
    else ch.empty('no jobs in this window');
    return ch;
  };
  mk('Wasted CPU (core-hours)', `waste-cpu-by-${r.by}`, (a) => a.cpu_hours, (v) => v.toFixed(2));
  mk('Wasted memory (GB-hours)', `waste-memory-by-${r.by}`, (a) => a.memory_gb_hours, (v) => fmt.gbh(v));

  const card = section(root, 'By ' + r.by);
  const tbl = h('table', { 'data-table': 'waste' });
  tbl.appendChild(h('thead', null, h('tr', null, ...[r.by, 'jobs', 'attempts', 'core-h', 'used', 'GB-h', 'used', 'failed', 'killed', 'speculative', 'over core-h', 'over GB-h', 'thrown away'].map((x, i) => h(i === 0 ? 'th' : 'th.num', null, x)))));
  const tb = h('tbody');
  const cell = (a: WasteAmount) => h('td.num', { class: a.attempts ? 'warn' : null, title: a.attempts ? `${a.attempts} attempts` : null },
    a.attempts ? `${a.cpu_hours.toFixed(2)} core-h · ${fmt.gbh(a.memory_gb_hours)}` : '–');
  for (const x of groups) {
    const key = r.by === 'job' ? h('a.mono', { href: jobURL(x.key) }, x.key) : r.by === 'user' || r.by === 'queue' ? h('a', { href: '/?' + r.by + '=' + enc(x.key) }, x.key || '–') : x.key;
    tb.appendChild(h('tr', { 'data-key': x.key }, h('td', null, key), h('td.num', null, fmt.num(x.jobs)), h('td.num', null, fmt.num(x.attempts)),
      h('td.num', null, x.cpu_hours.toFixed(2)), h('td.num', null, x.used_cpu_hours.toFixed(2)), h('td.num', null, fmt.gbh(x.memory_gb_hours)), h('td.num', null, fmt.gbh(x.used_memory_gb_hours)),
      cell(x.failed), cell(x.killed), cell(x.speculative), h('td.num', null, x.over_allocated.cpu_hours.toFixed(2)), h('td.num', null, fmt.gbh(x.over_allocated.memory_gb_hours)),
      h('td.num', null, fmt.pct(x.wasted_percent, 1))));
  }
  tbl.appendChild(tb);
  clear(card.querySelector('.card-head .spacer')!);
  card.appendChild(h('div.scroll-x', null, tbl));
}
