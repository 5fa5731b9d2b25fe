// The attempt page: summary, the process tree with roles and command lines,
// per-process charts stacked (so the JVM's share against a Streaming child
// shows), the memory limit on the memory charts, and the events.
import { h, clear, rawText } from '../dom';
import * as fmt from '../fmt';
import { get, AttemptDetail, LiveSeries, Proc, TSEvent, ms, enc, jobURL, hostURL, processURL, seriesValues } from '../api';
import { Ctx, showError, isAbort } from '../nav';
import { refresher } from '../live';
import { Chart, Option, axisFmt, axisTip, colorOf, lineSeries, limitLine, roleColor, timeOption, Fmt, fillGaps } from '../charts';
import { cpuDoubtTitle, cpuText, exitTitle, figure, grid, kv, outcomeBadge, repeatsCell, roleBadge, section, stateBadge, typeBadge } from './common';
import { profilesSection } from './profiles';

const PROC_METRICS = 'cpu_percent,rss_bytes,pss_bytes,vms_bytes,threads,read_bytes_per_s,write_bytes_per_s';
const ATT_METRICS = 'cpu_percent,rss_bytes,pss_bytes,vms_bytes,processes,read_bytes_per_s,write_bytes_per_s';
const MAX_DRAWN = 10;

// treeOrder lists processes parents first, each child under its parent.
export function treeOrder(ps: Proc[]): { p: Proc; depth: number }[] {
  const byPID = new Map<number, Proc>();
  for (const p of ps) if (!byPID.has(p.pid) || ms(p.start) > ms(byPID.get(p.pid)!.start)) byPID.set(p.pid, p);
  const kids = new Map<number, Proc[]>();
  const roots: Proc[] = [];
  for (const p of ps) {
    if (p.ppid !== p.pid && byPID.has(p.ppid) && byPID.get(p.ppid) !== p) {
      let l = kids.get(p.ppid);
      if (!l) kids.set(p.ppid, (l = []));
      l.push(p);
    } else roots.push(p);
  }
  const out: { p: Proc; depth: number }[] = [];
  const seen = new Set<string>();
  const walk = (p: Proc, d: number): void => {
    if (seen.has(p.key)) return;
    seen.add(p.key);
    out.push({ p, depth: d });
    for (const k of (kids.get(p.pid) ?? []).sort((a, b) => ms(a.start) - ms(b.start))) walk(k, d + 1);
  };
  for (const r of roots.sort((a, b) => ms(a.start) - ms(b.start))) walk(r, 0);
  for (const p of ps) if (!seen.has(p.key)) out.push({ p, depth: 0 });
  return out;
}

function procLabel(p: Proc): string {
  return `${p.role || p.comm || 'process'} ${p.pid}`;
}

function procColor(p: Proc, i: number, used: Map<string, number>): string {
  const n = used.get(p.role) ?? 0;
  used.set(p.role, n + 1);
  const base = roleColor[p.role];
  if (!base) return colorOf('', {}, i + 3);
  if (n === 0) return base;
  // Further processes of one role: the same hue, lighter or darker.
  const f = [0.75, 1.25, 0.55, 1.45][(n - 1) % 4];
  const c = parseInt(base.slice(1), 16);
  const ch = (s: number) => Math.max(0, Math.min(255, Math.round(((c >> s) & 255) * f)));
  return '#' + ((ch(16) << 16) | (ch(8) << 8) | ch(0)).toString(16).padStart(6, '0');
}

export async function attemptPage(c: Ctx): Promise<void> {
  const [jobID, attID] = c.params;
  const root = c.root;
  const base = `/api/v1/jobs/${enc(jobID)}/attempts/${enc(attID)}`;
  let d = await get<AttemptDetail>(base, c.signal);

  const head = h('div.page-head');
  const crumbs = h('div.crumbs', null, h('a', { href: '/jobs' }, 'Jobs'), ' / ', h('a', { href: jobURL(jobID) }, jobID), ' / ', h('span', null, 'attempt'));
  root.append(crumbs, head);
  const sum = section(root, 'Summary');
  const profCard = h('section.card', { 'data-section': 'profiles' });
  root.appendChild(profCard);
  const treeCard = section(root, 'Processes');
  treeCard.setAttribute('data-section', 'processes');
  const chartsHead = h('h2.section-title', null, 'Per process over time');
  root.appendChild(chartsHead);
  const g = grid(root, 'two');
  const evCard = section(root, 'Events');
  evCard.setAttribute('data-section', 'events');

  const renderTop = (): void => {
    clear(head);
    head.append(h('h1', null, 'Attempt ', h('span.mono', null, d.attempt_id)), typeBadge(d.type), stateBadge(d.state), d.outcome ? outcomeBadge(d.outcome) : '');
    const body = sum.querySelector('.sum-body') ?? sum.appendChild(h('div.sum-body'));
    clear(body);
    const limit = d.memory_mb * 1048576;
    body.append(
      h('div.figs', null,
        figure('duration', fmt.dur(d.duration_ms), d.state),
        figure('CPU', cpuText(d), d.duration_ms ? fmt.pct((100 * d.cpu_ms) / d.duration_ms) + ' of a core on average' : '', cpuDoubtTitle(d) || undefined),
        figure('peak RSS', fmt.bytes(d.peak_rss_bytes), limit ? fmt.pct((100 * d.peak_rss_bytes) / limit) + ' of memory.mb' : 'no limit known'),
        figure('peak PSS', fmt.bytes(d.peak_pss_bytes)),
        figure('memory.mb', limit ? fmt.bytes(limit) : '–', d.xmx_bytes ? '-Xmx ' + fmt.bytes(d.xmx_bytes) : ''),
        figure('processes', fmt.num(d.processes)),
        figure('read / written', fmt.bytes(d.read_bytes) + ' / ' + fmt.bytes(d.write_bytes)),
        figure('GC', fmt.dur(d.gc_time_ms), d.peak_heap_bytes ? 'peak heap ' + fmt.bytes(d.peak_heap_bytes) : '')),
      kv([['host', h('a', { href: hostURL(d.host) }, d.host)], ['container', d.container_id || '–'], ['job', h('a', { href: jobURL(d.job_id) }, d.job_id)],
        ['framework', d.framework], ['start', fmt.time(ms(d.start)), fmt.utc(ms(d.start))], ['end', d.end ? fmt.time(ms(d.end)) : d.state],
        ['streaming', d.streaming ? 'yes' : 'no'], ['java opts', d.java_opts ? h('code', null, rawText(d.java_opts)) : '–'],
        ['outcome', h('span', { 'data-outcome': d.outcome ?? '' }, outcomeBadge(d.outcome), d.exit_code != null ? ' exit ' + d.exit_code : ''), exitTitle(d)],
        ['repeats', d.retry_of ? (() => { const s = h('span'); repeatsCell(d, s); return s; })() : '–']]));
    if (d.exit_diagnostics) {
      body.append(h('div.diag', { 'data-diagnostics': '' }, h('h4', null, "The NodeManager's diagnostics"), h('pre.diag-text', null, rawText(d.exit_diagnostics))));
    }
  };
  const renderTree = (): void => {
    clear(treeCard);
    const ps = d.process_list ?? [];
    treeCard.append(h('div.card-head', null, h('h2', null, 'Processes'), h('span.spacer'), h('span.muted', null, `${ps.length} process${ps.length === 1 ? '' : 'es'}, children under their parent`)));
    const t = h('table.procs');
    t.appendChild(h('thead', null, h('tr', null, ...['pid', 'role', 'start', 'lived', 'CPU', 'children CPU', 'peak RSS', 'peak PSS', 'threads', 'read', 'written', 'command line'].map((x, i) => h(i >= 4 && i <= 10 ? 'th.num' : 'th', { title: headTips[x] }, x)))));
    const tb = h('tbody');
    const order = treeOrder(ps);
    const shown = order.slice(0, 400);
    for (const { p, depth } of shown) {
      const end = ms(p.end) || ms(p.last_seen);
      const pid = h('td.pid', null, h('a', { href: processURL(jobID, attID, p.key), title: 'Open process ' + p.pid }, String(p.pid)));
      pid.style.paddingLeft = 6 + depth * 14 + 'px';
      if (depth) pid.classList.add('child');
      tb.appendChild(h('tr', { 'data-key': p.key },
        pid, h('td', null, roleBadge(p.role)), h('td', null, fmt.shortTime(ms(p.start))), livedCell(p, end),
        h('td.num', null, fmt.dur(p.cpu_ms)), h('td.num', null, p.children_cpu_ms ? fmt.dur(p.children_cpu_ms) : ''), h('td.num', null, fmt.bytes(p.peak_rss_bytes)),
        h('td.num', null, p.peak_pss_bytes ? fmt.bytes(p.peak_pss_bytes) : '–'), h('td.num', null, fmt.num(p.max_threads)), h('td.num', null, fmt.bytes(p.read_bytes)),
        h('td.num', null, fmt.bytes(p.write_bytes)), cmdCell(p.cmdline || '[' + p.comm + ']')));
    }
    t.appendChild(tb);
    treeCard.appendChild(h('div.scroll-x', null, t));
    if (order.length > shown.length) treeCard.appendChild(h('p.muted', null, `${order.length - shown.length} more processes not listed`));
  };
  const renderEvents = (): void => {
    clear(evCard);
    const evs = d.events ?? [];
    evCard.append(h('div.card-head', null, h('h2', null, 'Events'), h('span.spacer'), h('span.muted', null, `${evs.length} event${evs.length === 1 ? '' : 's'}: process starts and exits, attempt switches, lost processes`)));
    evCard.appendChild(eventsTable(evs, (e) => (e.process ? processURL(jobID, attID, e.process) : null)));
  };
  renderTop();
  renderTree();
  renderEvents();
  profilesSection(c, profCard, jobID, base, () => d.state === 'running');

  const sub = `attempt ${attID} · ${d.host}`;
  const file = (s: string) => `${attID}-${s}`;
  const group = 'att-' + attID;
  const mk = (title: string, f: string, note?: string, zero = false) => new Chart(g, { title, subtitle: sub, file: file(f), height: 210, note, group, emptyIfZero: zero, emptyText: zero ? 'none recorded' : undefined });
  const charts = {
    cpu: mk('CPU (% of one core)', 'cpu', 'stacked per process; "exited & not drawn" is the rest of the attempt\'s CPU: processes that ended between samples, charged through their parent'),
    rss: mk('RSS', 'rss', 'stacked per process; red: the container size (memory.mb) that YARN enforces'),
    pss: mk('PSS', 'pss', 'shared pages split among the processes that map them; read every few samples, carried between reads'),
    vms: mk('Virtual memory', 'vms'),
    threads: mk('Threads', 'threads'),
    read: mk('Storage reads', 'read', undefined, true),
    write: mk('Storage writes', 'write', undefined, true),
  };
  c.onCleanup(() => Object.values(charts).forEach((x) => x.dispose()));

  let zoom: [number, number] = [0, 100];
  let full: [number, number] | null = null;
  const attSeries = new LiveSeries(`${base}/series?metrics=${ATT_METRICS}`);
  const procSeries = new Map<string, LiveSeries>();
  const ofProc = (key: string): LiveSeries => {
    let l = procSeries.get(key);
    if (!l) procSeries.set(key, (l = new LiveSeries(`/api/v1/processes/${enc(key)}/series?attempt=${enc(d.attempt_id)}&metrics=${PROC_METRICS}`)));
    return l;
  };
  // live: a live update, which fetches the new buckets only.
  const loadCharts = async (live = false): Promise<void> => {
    const ps = (d.process_list ?? []).slice();
    const weight = (p: Proc) => p.cpu_ms / Math.max(1, d.cpu_ms) + p.peak_rss_bytes / Math.max(1, d.peak_rss_bytes);
    const drawn = ps.sort((a, b) => weight(b) - weight(a)).slice(0, MAX_DRAWN);
    drawn.sort((a, b) => ms(a.start) - ms(b.start) || a.pid - b.pid);
    const points = charts.cpu.points();
    // The attempt's life (to its last data while it runs); zoomed in, only the part shown, finer.
    const from = ms(d.start), to = (ms(d.end) || ms(d.last_seen) || Date.now()) + 1;
    full = [from, to];
    const q0 = Math.floor(from + ((to - from) * zoom[0]) / 100), q1 = Math.ceil(from + ((to - from) * zoom[1]) / 100) + 1;
    const [att, ...per] = await Promise.all([
      attSeries.fetch(q0, q1, points, c.signal, live),
      ...drawn.map((p) => ofProc(p.key).fetch(q0, q1, points, c.signal, live)),
    ]);
    if (!att.times.length) {
      Object.values(charts).forEach((x) => x.empty('no samples yet'));
      return;
    }
    const used = new Map<string, number>();
    const colors = drawn.map((p, i) => procColor(p, i, used));
    const notDrawn = ps.length - drawn.length;
    const stacked = (metric: string, attMetric: string | null, f: Fmt, extra: (o: Record<string, unknown>) => void = () => {}) => (): Option => {
      const o = timeOption(f, full![0], full![1]) as Record<string, unknown>;
      o.tooltip = { trigger: 'axis', confine: true, formatter: axisTip(f, undefined, true) };
      const series: Record<string, unknown>[] = [];
      const sum = new Float64Array(att.times.length);
      drawn.forEach((p, i) => {
        const s = per[i];
        // PSS is read every few ticks only: carry it between its samples.
        const vals = metric === 'pss_bytes' ? fillGaps(seriesValues(s, metric), seriesValues(s, 'rss_bytes')) : seriesValues(s, metric);
        // Align on the attempt's buckets (same window and step).
        const byT = new Map<number, number | null>();
        s.times.forEach((t, j) => byT.set(t, vals[j]));
        const data = att.times.map((t, j) => {
          const v = byT.get(t);
          if (v !== null && v !== undefined) sum[j] += v;
          return [t, v ?? null] as [number, number | null];
        });
        series.push(lineSeries(procLabel(p), data, colors[i], { stack: 'p' }));
      });
      if (attMetric) {
        const av = seriesValues(att, attMetric);
        const rest = att.times.map((t, j) => {
          const v = av[j];
          if (v === null) return [t, null] as [number, number | null];
          const r = v - sum[j];
          return [t, r > Math.max(1e-9, Math.abs(v) * 0.02) ? r : 0] as [number, number | null];
        });
        if (rest.some((x) => x[1])) {
          series.push(lineSeries(notDrawn ? `exited & ${notDrawn} not drawn` : 'exited', rest, roleColor.other, { stack: 'p' }));
        }
      }
      o.series = series;
      extra(o);
      return o;
    };
    const limit = d.memory_mb * 1048576;
    const withLimit = (o: Record<string, unknown>) => {
      if (!limit) return;
      (o.series as unknown[]).push(limitLine('memory.mb', limit, `memory.mb ${fmt.bytes(limit)}`));
    };
    charts.cpu.set(stacked('cpu_percent', 'cpu_percent', axisFmt.pct));
    charts.rss.set(stacked('rss_bytes', 'rss_bytes', axisFmt.bytes, (o) => {
      withLimit(o);
      if (d.xmx_bytes) (o.series as unknown[]).push(limitLine('-Xmx', d.xmx_bytes, `-Xmx ${fmt.bytes(d.xmx_bytes)}`, '#8a5cc7'));
    }));
    charts.pss.set(stacked('pss_bytes', null, axisFmt.bytes, withLimit));
    charts.vms.set(stacked('vms_bytes', 'vms_bytes', axisFmt.bytes));
    charts.threads.set(stacked('threads', null, axisFmt.count));
    charts.read.set(stacked('read_bytes_per_s', 'read_bytes_per_s', axisFmt.rate));
    charts.write.set(stacked('write_bytes_per_s', 'write_bytes_per_s', axisFmt.rate));
    chartsHead.textContent = notDrawn > 0 ? `Per process over time (the ${drawn.length} largest of ${ps.length})` : 'Per process over time';
  };
  charts.cpu.onZoom = (a, b) => {
    zoom = [a, b];
    void loadCharts().catch(() => {});
  };
  document.title = `${attID} · taskscope`;
  try {
    await loadCharts();
  } catch (e) {
    if (!isAbort(e)) showError(g, e);
  }

  c.onCleanup(refresher(async () => {
    if (d.state !== 'running') return;
    d = await get<AttemptDetail>(base, c.signal);
    renderTop();
    renderTree();
    renderEvents();
    await loadCharts(true);
  }));
}

const headTips: Record<string, string> = {
  lived: 'how long the process lived; for a JVM that ran several attempts, also the part that belongs to this one',
  CPU: 'user + system CPU of the process itself (in this attempt)', 'children CPU': 'CPU of its reaped children (cutime + cstime)',
  threads: 'most threads at once',
};

// livedCell is the process's life, and its part in this attempt when the
// process ran other attempts too (JVM reuse, Tez container reuse).
function livedCell(p: Proc, end: number): HTMLElement {
  const life = p.end ? fmt.dur(end - ms(p.start)) : 'running';
  const from = ms(p.member_from), to = ms(p.member_to);
  const partial = (from && from > ms(p.start) + 1000) || (to && p.end && to < ms(p.end) - 1000) || (to && !p.end);
  if (!partial) return h('td', null, life);
  return h('td', { title: `in this attempt ${fmt.time(from)} – ${to ? fmt.time(to) : 'now'}` }, life, h('div.muted.small', null, 'here ' + fmt.dur((to || end) - (from || ms(p.start)))));
}

// cmdCell shows a command line in two lines at most; a click shows it all.
function cmdCell(cmd: string): HTMLElement {
  if (cmd.length <= 180) return h('td.cmd', { 'data-cmd': '' }, rawText(cmd));
  const div = h('div.clamp', { title: 'click to show all of it' }, rawText(cmd));
  div.addEventListener('click', () => div.classList.toggle('clamp'));
  return h('td.cmd', { 'data-cmd': '' }, div);
}

export function eventsTable(evs: TSEvent[], href: (e: TSEvent) => string | null, withJob = false): HTMLElement {
  if (!evs.length) return h('p.empty', null, 'No events.');
  const t = h('table.events');
  t.appendChild(h('thead', null, h('tr', null, h('th', null, 'time'), h('th', null, 'kind'), h('th.num', null, 'pid'), withJob ? h('th', null, 'job / attempt') : null, h('th.num', null, 'value'), h('th', null, 'message'))));
  const tb = h('tbody');
  for (const e of evs.slice(0, 2000)) {
    const u = href(e);
    tb.appendChild(h('tr', { 'data-kind': e.kind },
      h('td', null, fmt.time(ms(e.time))), h('td', null, h('span.badge.ev-' + e.kind.replace(/[^a-z_]/g, ''), null, e.kind)),
      h('td.num', null, u && e.pid ? h('a', { href: u }, String(e.pid)) : e.pid ? String(e.pid) : ''),
      withJob ? h('td.mono', null, e.attempt_id && e.job_id ? h('a', { href: '/jobs/' + enc(e.job_id) + '/attempts/' + enc(e.attempt_id) }, e.attempt_id) : e.job_id ? h('a', { href: jobURL(e.job_id) }, e.job_id) : '') : null,
      h('td.num', null, e.value ? fmt.num(e.value) : ''), h('td.cmd', null, rawText(e.message ?? ''))));
  }
  t.appendChild(tb);
  return h('div.scroll-x', null, t);
}
