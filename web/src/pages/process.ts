// The process page: one process of an attempt with every metric over its life.
import { h, rawText } from '../dom';
import * as fmt from '../fmt';
import { get, AttemptDetail, Series, ms, enc, jobURL, attemptURL, processURL, seriesValues } from '../api';
import { Ctx, showError, isAbort } from '../nav';
import { refresher } from '../live';
import { Chart, Option, axisFmt, axisTip, lineSeries, limitLine, pairs, timeOption, Fmt, lastData, fillGaps } from '../charts';
import { figure, grid, kv, roleBadge, section } from './common';

const METRICS = ['cpu_user_percent', 'cpu_sys_percent', 'cpu_children_percent', 'rss_bytes', 'pss_bytes', 'vms_bytes', 'threads', 'fds',
  'read_bytes_per_s', 'write_bytes_per_s', 'rchar_per_s', 'wchar_per_s', 'minflt_per_s', 'majflt_per_s', 'ctx_voluntary_per_s',
  'ctx_involuntary_per_s', 'sched_wait_percent', 'heap_used_bytes', 'heap_committed_bytes', 'heap_max_bytes', 'gc_percent', 'jvm_threads'];

export async function processPage(c: Ctx): Promise<void> {
  const [jobID, attID, key] = c.params;
  const root = c.root;
  document.title = `process ${key} · taskscope`;
  const base = `/api/v1/jobs/${enc(jobID)}/attempts/${enc(attID)}`;
  let d = await get<AttemptDetail>(base, c.signal);
  const find = () => (d.process_list ?? []).find((p) => p.key === key);
  let p = find();
  root.append(h('div.crumbs', null, h('a', { href: '/jobs' }, 'Jobs'), ' / ', h('a', { href: jobURL(jobID) }, jobID), ' / ', h('a', { href: attemptURL(jobID, attID) }, attID), ' / process'));
  if (!p) {
    showError(root, new Error(`process ${key} is not in attempt ${attID}`));
    return;
  }
  const head = h('div.page-head', null, h('h1', null, 'Process ', h('span.mono', null, String(p.pid))), roleBadge(p.role), h('span.sub', null, p.comm));
  root.appendChild(head);
  const sum = section(root, 'Summary');
  const body = h('div.sum-body');
  sum.appendChild(body);
  // The tree around the process, within the attempt.
  const parentLink = (): Node => {
    const par = (d.process_list ?? []).find((x) => x.pid === p!.ppid && x.key !== p!.key);
    return par ? h('a', { href: processURL(jobID, attID, par.key) }, `${par.pid} (${par.role || par.comm})`) : document.createTextNode(`${p!.ppid} (not in this attempt)`);
  };
  const childLinks = (): Node => {
    const kids = (d.process_list ?? []).filter((x) => x.ppid === p!.pid && x.key !== p!.key);
    if (!kids.length) return document.createTextNode('none');
    const span = h('span');
    kids.slice(0, 30).forEach((k, i) => span.append(i ? ', ' : '', h('a', { href: processURL(jobID, attID, k.key) }, `${k.pid} (${k.role || k.comm})`)));
    if (kids.length > 30) span.append(` and ${kids.length - 30} more`);
    return span;
  };
  const render = () => {
    p = find() ?? p!;
    body.textContent = '';
    const end = ms(p.end) || ms(p.last_seen);
    body.append(h('div.figs', null,
      figure('lived', fmt.dur(end - ms(p.start)), p.end ? 'exited' : 'running'),
      figure('CPU', fmt.dur(p.cpu_ms), p.children_cpu_ms ? 'children ' + fmt.dur(p.children_cpu_ms) : 'own, user + system'),
      figure('peak RSS', fmt.bytes(p.peak_rss_bytes)), figure('peak PSS', p.peak_pss_bytes ? fmt.bytes(p.peak_pss_bytes) : '–'),
      figure('peak virtual', fmt.bytes(p.peak_vms_bytes)), figure('threads', fmt.num(p.max_threads), 'most at once'),
      figure('read / written', fmt.bytes(p.read_bytes) + ' / ' + fmt.bytes(p.write_bytes)), figure('samples', fmt.num(p.samples))),
      kv([['pid / ppid', `${p.pid} / ${p.ppid}`], ['session', String(p.sid || '–')], ['user', p.user || '–'], ['host', p.host],
        ['start', fmt.time(ms(p.start))], ['end', p.end ? fmt.time(ms(p.end)) : 'running'], ['key', h('span.mono', null, p.key)],
        ['parent', parentLink()], ['children', childLinks()],
        ['command line', h('code.cmd', { 'data-cmd': '' }, rawText(p.cmdline || '[' + p.comm + ']'))]]));
  };
  render();

  root.appendChild(h('h2.section-title', null, 'Over time'));
  const g = grid(root, 'two');
  const sub = `${p.role} ${p.pid} · attempt ${attID}`;
  const file = (s: string) => `${attID}-${p!.pid}-${s}`;
  const mk = (title: string, f: string, emptyText?: string) => new Chart(g, { title, subtitle: sub, file: file(f), height: 200, group: 'proc-' + key, emptyText, emptyIfZero: !!emptyText });
  const ch = {
    cpu: mk('CPU (% of one core)', 'cpu'), mem: mk('Memory', 'memory'), heap: mk('JVM heap and GC', 'heap', 'not a JVM, or no hsperfdata'), threads: mk('Threads and file descriptors', 'threads'),
    io: mk('IO', 'io', 'no IO recorded'), faults: mk('Page faults', 'faults'), ctx: mk('Context switches and run-queue wait', 'ctx'),
  };
  c.onCleanup(() => Object.values(ch).forEach((x) => x.dispose()));
  const load = async () => {
    const from = ms(p!.start);
    const to = (ms(p!.end) || Math.max(ms(p!.last_seen), Date.now())) + 1;
    const s = await get<Series>(`/api/v1/processes/${enc(key)}/series?attempt=${enc(attID)}&from=${from}&to=${to}&points=${ch.cpu.points()}&metrics=${METRICS.join(',')}`, c.signal);
    const end = lastData(s.times, s.step_ms, ...s.series.map((x) => x.values));
    const line = (f: Fmt, items: [string, string, string, { stack?: string; dashed?: boolean; area?: boolean }?][], extra?: (o: Record<string, unknown>) => void) => (): Option => {
      const o = timeOption(f, from, Math.min(s.to_ms, end)) as Record<string, unknown>;
      o.tooltip = { trigger: 'axis', confine: true, formatter: axisTip(f) };
      o.series = items.filter(([m]) => seriesValues(s, m).some((v) => v !== null)).map(([m, name, color, opts]) => {
        const v = seriesValues(s, m);
        return lineSeries(name, pairs(s.times, m === 'pss_bytes' ? fillGaps(v, seriesValues(s, 'rss_bytes')) : v), color, opts ?? {});
      });
      extra?.(o);
      return o;
    };
    ch.cpu.set(line(axisFmt.pct, [['cpu_user_percent', 'user', '#3b6fd4', { stack: 'c' }], ['cpu_sys_percent', 'system', '#c8423b', { stack: 'c' }], ['cpu_children_percent', 'reaped children', '#f2c14e', { stack: 'c' }]]));
    const limit = d.memory_mb * 1048576;
    ch.mem.set(line(axisFmt.bytes, [['rss_bytes', 'RSS', '#3b6fd4', { area: true }], ['pss_bytes', 'PSS', '#3a9d5d'], ['vms_bytes', 'virtual', '#9aa3ad', { dashed: true }]], (o) => {
      if (limit) (o.series as unknown[]).push(limitLine('memory.mb', limit, `attempt memory.mb ${fmt.bytes(limit)}`));
    }));
    ch.heap.set(line(axisFmt.bytes, [['heap_used_bytes', 'heap used', '#8a5cc7', { area: true }], ['heap_committed_bytes', 'heap committed', '#3b6fd4'], ['heap_max_bytes', 'heap max', '#c8423b', { dashed: true }]], (o) => {
      const gc = seriesValues(s, 'gc_percent');
      if (gc.some((v) => v !== null)) {
        o.yAxis = [o.yAxis, { type: 'value', max: 100, axisLabel: { formatter: (v: number) => v + ' %', fontSize: 10 }, splitLine: { show: false } }];
        (o.series as unknown[]).push({ ...lineSeries('GC time', pairs(s.times, gc), '#e8892b'), yAxisIndex: 1 });
        o.tooltip = { trigger: 'axis', confine: true, formatter: axisTip((v) => fmt.bytes(v)) };
        (o.grid as Record<string, unknown>).right = 48;
      }
    }));
    ch.threads.set(line(axisFmt.count, [['threads', 'threads', '#3b6fd4'], ['jvm_threads', 'JVM live threads', '#8a5cc7'], ['fds', 'file descriptors', '#e8892b']]));
    ch.io.set(line(axisFmt.rate, [['read_bytes_per_s', 'storage read', '#2aa6a6', { area: true }], ['write_bytes_per_s', 'storage written', '#d45d9a', { area: true }], ['rchar_per_s', 'read(2)', '#6b7f99', { dashed: true }], ['wchar_per_s', 'write(2)', '#b8860b', { dashed: true }]]));
    ch.faults.set(line((v) => fmt.num(v, 1) + '/s', [['minflt_per_s', 'minor', '#3b6fd4'], ['majflt_per_s', 'major', '#c8423b']]));
    ch.ctx.set(line((v) => fmt.num(v, 1), [['ctx_voluntary_per_s', 'voluntary /s', '#3b6fd4'], ['ctx_involuntary_per_s', 'involuntary /s', '#e8892b'], ['sched_wait_percent', 'run-queue wait %', '#c8423b', { dashed: true }]]));
  };
  try {
    await load();
  } catch (e) {
    if (!isAbort(e)) showError(g, e);
  }
  c.onCleanup(refresher(async () => {
    if (p!.end) return;
    d = await get<AttemptDetail>(base, c.signal);
    render();
    await load();
  }));
}
