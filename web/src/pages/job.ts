// The job page: summary, findings, timeline per host, CPU and memory over
// time, distributions per task type, and the attempts table.
import { h, clear } from '../dom';
import * as fmt from '../fmt';
import { get, JobDetail, Findings, Finding, LiveSeries, Attempt, CriticalPath, ms, prepare, attemptURL, hostURL, historyURL, enc } from '../api';
import { Ctx, showError, isAbort, navigate } from '../nav';
import { refresher } from '../live';
import { VTable, Column } from '../vtable';
import { Chart } from '../charts';
import { byTypeText, cpuDoubtTitle, cpuText, exitText, exitTitle, figure, grid, kv, outcomeBadge, outcomeColor, outcomeKey, outcomeText, repeatsCell, section, sevBadge, stateBadge, typeBadge, typeStateTable } from './common';
import { attachAttemptClick, attemptsOption, cpuOption, distOption, fixDistAxes, ioOption, memOption, timelineOption } from './jobcharts';

const SERIES = 'cpu_percent,rss_bytes,pss_bytes,heap_used_bytes,attempts,read_bytes_per_s,write_bytes_per_s';

export async function jobPage(c: Ctx): Promise<void> {
  const jobID = c.params[0];
  const root = c.root;
  const t0 = performance.now();
  const job = await get<JobDetail>('/api/v1/jobs/' + enc(jobID), c.signal);
  performance.mark('job-fetched');
  const atts = (job.attempt_list ?? []).map(prepare);

  const head = h('div.page-head');
  root.appendChild(head);
  const sumCard = section(root, 'Summary');
  sumCard.classList.add('summary-card');
  const findCard = h('section.card', { 'data-section': 'findings' });
  root.appendChild(findCard);
  const pathCard = h('section.card.quiet', { 'data-section': 'critical-path' });

  // The attempts table is built first (it is what a big job waits for);
  // charts follow in the next frames.
  const tableCard = h('section.card', { 'data-section': 'attempts' });
  const timelineGrid = grid(root, 'one');
  root.appendChild(pathCard);
  const seriesGrid = grid(root, 'two');
  const distHead = h('h2.section-title', null, 'Distributions per task type');
  root.appendChild(distHead);
  const distGrid = grid(root, 'three');
  root.appendChild(tableCard);

  const cols: Column<Attempt>[] = [
    { id: 'attempt', title: 'Attempt', width: 286, min: 272, kind: 'text', get: (a) => a.attempt_id, href: (a) => attemptURL(a.job_id, a.attempt_id), cls: () => 'mono' },
    { id: 'type', title: 'Type', width: 64, kind: 'text', get: (a) => a.type, cell: (a, td) => td.appendChild(typeBadge(a.type)) },
    { id: 'state', title: 'State', width: 76, kind: 'text', get: (a) => a.state, cell: (a, td) => td.appendChild(stateBadge(a.state)) },
    { id: 'outcome', title: 'Outcome', width: 104, kind: 'text', get: (a) => a.outcome ?? '', fmt: (a) => outcomeText(a.outcome), cell: (a, td) => td.appendChild(outcomeBadge(a.outcome)), tip: 'How it ended, as its node showed it: succeeded, failed, killed, killed: memory (YARN\'s memory check or the kernel\'s OOM killer), lost' },
    { id: 'exit', title: 'Exit', width: 50, kind: 'num', get: (a) => a.exit_code ?? -1e9, fmt: exitText, tip: 'The exit code it ended with (128 + n: killed by signal n; YARN\'s own below 0: -104 over its physical memory, -105 killed by the application master, ...); hover a cell for where it came from', cell: (a, td) => { td.textContent = exitText(a); td.title = exitTitle(a); } },
    { id: 'repeats', title: 'Repeats', width: 92, kind: 'text', get: (a) => (a.retry_of ? (a.speculative ? 'copy of ' : 'retry of ') + a.retry_of : ''), cell: repeatsCell, tip: 'The attempt of the same task this one repeats: a retry after it ended, or a speculative copy beside it' },
    { id: 'host', title: 'Host', width: 116, kind: 'text', get: (a) => a.host, href: (a) => hostURL(a.host) },
    { id: 'start', title: 'Start', width: 76, kind: 'time', get: (a) => a.t0!, fmt: (a) => fmt.shortTime(a.t0), filter: false },
    { id: 'dur', title: 'Duration', width: 72, kind: 'dur', get: (a) => a.duration_ms, fmt: (a) => fmt.dur(a.duration_ms) },
    { id: 'cpu', title: 'CPU', width: 68, kind: 'dur', get: (a) => a.cpu_ms, fmt: cpuText, tip: 'CPU time of all its processes, exited ones included; ± when it is an estimate (hover)', cell: (a, td) => { td.textContent = cpuText(a); td.title = cpuDoubtTitle(a) || td.title; } },
    { id: 'util', title: 'CPU %', width: 56, kind: 'num', get: (a) => (a.duration_ms ? (100 * a.cpu_ms) / a.duration_ms : 0), fmt: (a) => (a.duration_ms ? fmt.pct((100 * a.cpu_ms) / a.duration_ms) : '–'), tip: 'CPU time / duration, in % of one core' },
    { id: 'rss', title: 'Peak RSS', width: 76, kind: 'bytes', get: (a) => a.peak_rss_bytes, fmt: (a) => fmt.bytes(a.peak_rss_bytes), tip: 'Peak of the RSS summed over its processes' },
    { id: 'pss', title: 'Peak PSS', width: 76, kind: 'bytes', get: (a) => a.peak_pss_bytes, fmt: (a) => (a.peak_pss_bytes ? fmt.bytes(a.peak_pss_bytes) : '–') },
    { id: 'limit', title: 'Limit', width: 70, kind: 'bytes', get: (a) => a.memory_mb * 1048576, fmt: (a) => (a.memory_mb ? fmt.bytes(a.memory_mb * 1048576) : '–'), tip: 'memory.mb: the container or slot size asked for' },
    { id: 'use', title: 'Used', width: 52, kind: 'num', get: (a) => (a.memory_mb ? (100 * a.peak_rss_bytes) / (a.memory_mb * 1048576) : 0), fmt: (a) => (a.memory_mb ? fmt.pct((100 * a.peak_rss_bytes) / (a.memory_mb * 1048576)) : '–'), tip: 'Peak RSS / memory.mb', cls: (a) => (a.memory_mb && a.peak_rss_bytes > a.memory_mb * 1048576 * 0.9 ? 'warn' : '') },
    { id: 'procs', title: 'Procs', width: 50, kind: 'num', get: (a) => a.processes, tip: 'Processes seen' },
    { id: 'read', title: 'Read', width: 70, kind: 'bytes', get: (a) => a.read_bytes, fmt: (a) => fmt.bytes(a.read_bytes) },
    { id: 'write', title: 'Written', width: 70, kind: 'bytes', get: (a) => a.write_bytes, fmt: (a) => fmt.bytes(a.write_bytes) },
    { id: 'gc', title: 'GC', width: 60, kind: 'dur', get: (a) => a.gc_time_ms, fmt: (a) => fmt.dur(a.gc_time_ms), tip: 'JVM time in garbage collection' },
  ];
  const table = new VTable<Attempt>(cols, { label: 'attempts', maxHeight: 560, rowClass: (a) => (a.state === 'running' ? 'running' : '') });
  table.el.setAttribute('data-table', 'attempts');
  tableCard.append(h('div.card-head', null, h('h2', null, 'Attempts'), h('span.spacer'), h('span.muted.hint', null, 'click a column to sort · filters take text, or >5m, <1GiB, 1m..5m')), table.el);

  let cur = job;
  let curAtts = atts;
  let path: CriticalPath | null = null;
  const renderHead = (): void => {
    clear(head);
    head.append(h('h1', null, 'Job ', h('span.mono', null, cur.job_id)), stateBadge(cur.state), h('span.sub', null, cur.name), h('span.spacer'),
      h('a.button', { href: historyURL(cur.job_id), 'data-link': 'history', title: 'This run against the earlier runs of the same job (its name with dates and numbers normalized, user, queue)' }, 'Runs of this job'));
  };
  const renderSummary = (): void => {
    const body = sumCard.querySelector('.sum-body') ?? sumCard.appendChild(h('div.sum-body'));
    clear(body);
    const start = ms(cur.start), end = ms(cur.end) || ms(cur.last_seen);
    const used = cur.memory_gb_hours ? (100 * cur.used_memory_gb_hours) / cur.memory_gb_hours : NaN;
    body.append(
      h('div.figs', null,
        figure('duration', fmt.dur(end - start), cur.state === 'running' ? 'running' : 'finished ' + fmt.shortTime(ms(cur.end))),
        figure('attempts', fmt.num(cur.attempts), cur.running ? cur.running + ' running' : byTypeText(cur.attempts_by_type)),
        figure('CPU', fmt.cpuHours(cur.cpu_ms), cur.cpu_ms >= 3.6e6 ? 'core-hours' : 'CPU time', fmt.dur(cur.cpu_ms) + ' of CPU time, ' + (cur.cpu_ms / 3.6e6).toFixed(3) + ' core-hours'),
        figure('memory allocated', fmt.gbh(cur.memory_gb_hours), 'memory.mb × duration'),
        figure('memory used', fmt.gbh(cur.used_memory_gb_hours), isFinite(used) ? fmt.pct(used) + ' of allocated' : 'RSS × time'),
        figure('peak RSS', fmt.bytes(cur.peak_rss_bytes), 'largest attempt'),
        figure('hosts', fmt.num(cur.hosts))),
      h('div.sum-cols', null,
        kv([['framework', cur.framework], ['user', cur.user], ['queue', cur.queue], ['application', cur.app_id ?? '–'],
          ['start', fmt.time(start), fmt.utc(start)], ['end', cur.end ? fmt.time(ms(cur.end)) : 'running (last data ' + fmt.shortTime(ms(cur.last_seen)) + ')'],
          ['by type', byTypeText(cur.attempts_by_type) || '–']]),
        h('div', null, h('h4', null, 'Attempts by type and state'), typeStateTable(curAtts), h('h4', null, 'Attempts by type and outcome'),
          h('div', { 'data-outcomes': '' }, typeStateTable(curAtts, outcomeLabel, OUTCOME_ORDER)))));
  };
  renderHead();
  renderSummary();
  findCard.appendChild(h('div.card-head', null, h('h2', null, 'Findings'), h('span.spacer'), h('span.muted', null, 'analysing…')));
  findCard.classList.add('quiet');
  table.setRows(atts);
  // The figure the 10,000-attempt benchmark reads.
  performance.mark('attempts-table-rendered', { detail: { rows: atts.length, ms: performance.now() - t0 } });
  tableCard.setAttribute('data-rendered-ms', String(Math.round(performance.now() - t0)));

  // Charts.
  const group = 'job-' + jobID;
  const sub = `job ${jobID} · ${job.name}`;
  const file = (s: string) => `${jobID}-${s}`;
  const timeline = new Chart(timelineGrid, { title: 'Attempts per host over time', subtitle: sub, file: file('timeline'), group, height: 200, wide: true, note: 'each bar an attempt, coloured by its outcome or its task type, failed, killed and lost ones outlined red; the critical path outlined black and joined by a dashed line; dotted lines: where each type\'s last wave began; click a bar to open it; scroll to zoom (all time charts follow, and fetch finer data)' });
  // Colour the timeline by outcome (the default) or by task type.
  let colorBy: 'outcome' | 'type' = 'outcome';
  const colorSel = h('select.small', { 'data-timeline-color': '', title: 'What the bars are coloured by' },
    h('option', { value: 'outcome' }, 'by outcome'), h('option', { value: 'type' }, 'by type')) as HTMLSelectElement;
  colorSel.addEventListener('change', () => {
    colorBy = colorSel.value === 'type' ? 'type' : 'outcome';
    drawAttemptCharts();
  });
  timeline.card.querySelector('.card-head .spacer')?.after(colorSel);
  const cpu = new Chart(seriesGrid, { title: 'CPU of the job (cores)', subtitle: sub, file: file('cpu'), group, height: 200 });
  const mem = new Chart(seriesGrid, { title: 'Memory of the job', subtitle: sub, file: file('memory'), group, height: 200, note: 'allocated: memory.mb of the attempts running; RSS and PSS summed over their processes' });
  const running = new Chart(seriesGrid, { title: 'Attempts running', subtitle: sub, file: file('attempts'), group, height: 160 });
  const io = new Chart(seriesGrid, { title: 'Storage IO of the job', subtitle: sub, file: file('io'), group, height: 160, emptyText: 'no storage IO recorded', emptyIfZero: true });
  const dDur = new Chart(distGrid, { title: 'Duration', subtitle: sub, file: file('duration-by-type'), height: 220 });
  const dCPU = new Chart(distGrid, { title: 'CPU time', subtitle: sub, file: file('cpu-by-type'), height: 220 });
  const dMem = new Chart(distGrid, { title: 'Peak RSS', subtitle: sub, file: file('peak-rss-by-type'), height: 220 });
  const charts = [timeline, cpu, mem, running, io, dDur, dCPU, dMem];
  c.onCleanup(() => charts.forEach((x) => x.dispose()));
  attachAttemptClick(timeline, atts);
  for (const d of [dDur, dCPU, dMem]) {
    d.onClick = (p: unknown) => {
      const v = (p as { seriesType?: string; value?: number[] }).value;
      if ((p as { seriesType?: string }).seriesType === 'scatter' && v) {
        const a = curAtts[v[2]];
        if (a) navigate(attemptURL(a.job_id, a.attempt_id));
      }
    };
  }

  const drawAttemptCharts = (): void => {
    if (!curAtts.length) {
      for (const x of [timeline, dDur, dCPU, dMem]) x.empty('no attempts yet');
      return;
    }
    const [from, to] = window();
    const marks = (path?.waves ?? []).filter((w) => w.waves > 1).map((w) => ({ t: ms(w.last_wave_start), label: `${w.task_type}${w.vertex ? ' ' + w.vertex : ''} wave ${w.waves} (${fmt.pct(w.last_wave_fill_percent)} full)` }));
    const colors = colorBy === 'outcome' ? { colorKey: outcomeKey, colors: outcomeColor } : {};
    const tl = timelineOption(curAtts, from, to, { ...colors, critical: (path?.steps ?? []).map((s) => s.attempt_id), marks });
    timeline.body.style.height = Math.min(640, Math.max(140, Math.min(tl.rows, 40) * 18 + 64)) + 'px';
    timeline.inst?.resize();
    attachAttemptClick(timeline, curAtts);
    timeline.set(tl.option);
    dDur.set(() => fixDistAxes(distOption(curAtts, (a) => a.duration_ms, fmt.dur, 'duration')));
    dCPU.set(() => fixDistAxes(distOption(curAtts, (a) => a.cpu_ms, fmt.dur, 'CPU time')));
    dMem.set(() => fixDistAxes(distOption(curAtts, (a) => a.peak_rss_bytes, fmt.bytes, 'peak RSS')));
  };
  // Every chart of the page spans the job's life (to its last data while it runs).
  const window = (): [number, number] => {
    let from = ms(cur.start), to = ms(cur.end) || ms(cur.last_seen);
    for (const a of curAtts) {
      from = Math.min(from || a.t0!, a.t0!);
      to = Math.max(to, a.t1!);
    }
    return [from, Math.max(to, from + 1000) + 1];
  };
  // zoom is the part of the window shown (0..100 %): zooming in asks the
  // server for that part only, at the same point budget, so finer buckets.
  let zoom: [number, number] = [0, 100];
  const series = new LiveSeries(`/api/v1/jobs/${enc(jobID)}/series?metrics=${SERIES}`);
  // live: a live update, which fetches the new buckets only.
  const loadSeries = async (live = false): Promise<void> => {
    const [from, to] = window();
    const q0 = Math.floor(from + ((to - from) * zoom[0]) / 100), q1 = Math.ceil(from + ((to - from) * zoom[1]) / 100) + 1;
    const s = await series.fetch(q0, q1, cpu.points(), c.signal, live);
    if (!s.times.length) {
      for (const x of [cpu, mem, running, io]) x.empty('no samples yet');
      return;
    }
    const win: [number, number] = [from, to];
    cpu.set(() => cpuOption(s, win));
    mem.set(() => memOption(s, curAtts, win));
    running.set(() => attemptsOption(s, win));
    io.set(() => ioOption(s, win));
  };
  // The findings come after the table: the analysis of a big job takes
  // longer than its attempts list, and would compete with it for the server.
  cpu.onZoom = (a, b) => {
    zoom = [a, b];
    void loadSeries().catch(() => {});
  };
  const gotFindings = (f: Findings | null): void => {
    renderFindings(findCard, f, jobID);
    path = f?.critical_path ?? null;
    renderPath(pathCard, path, jobID);
  };
  void get<Findings>('/api/v1/jobs/' + enc(jobID) + '/findings', c.signal).then((f) => {
    gotFindings(f);
    if (curAtts.length) drawAttemptCharts();
  }, (e) => {
    if (!isAbort(e)) gotFindings(null);
  });
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  try {
    drawAttemptCharts();
    await loadSeries();
  } catch (e) {
    if (!isAbort(e)) showError(seriesGrid, e);
  }

  document.title = `${jobID} · taskscope`;
  // Live: a running job refetches everything it shows (a big one at most every 10 s).
  c.onCleanup(refresher(async () => {
    if (cur.state !== 'running') return;
    const [j, f] = await Promise.all([get<JobDetail>('/api/v1/jobs/' + enc(jobID), c.signal), get<Findings>('/api/v1/jobs/' + enc(jobID) + '/findings', c.signal).catch(() => null)]);
    cur = j;
    curAtts = (j.attempt_list ?? []).map(prepare);
    renderHead();
    renderSummary();
    gotFindings(f);
    table.setRows(curAtts);
    drawAttemptCharts();
    await loadSeries(true);
  }, () => (curAtts.length > 2000 ? 10000 : 0)));
}

// renderPath shows the critical path (each step with what its processes
// did), the waves of each task type and the what-ifs.
export function renderPath(card: HTMLElement, p: CriticalPath | null, jobID: string): void {
  clear(card);
  const steps = p?.steps ?? [];
  card.append(h('div.card-head', null, h('h2', null, 'Critical path'), h('span.spacer'),
    h('span.muted', null, steps.length ? `${steps.length} attempts set the job's ${fmt.dur((p?.duration_s ?? 0) * 1000)}` : 'no attempts yet')));
  if (!p || !steps.length) {
    card.classList.add('quiet');
    return;
  }
  card.classList.remove('quiet');
  const t = h('table.mini.path', { 'data-table': 'critical-path' });
  t.appendChild(h('thead', null, h('tr', null, ...['attempt', 'type', 'wave', 'host', 'start', 'duration', 'waited', 'CPU', 'GC', 'CPU wait', 'off CPU', 'what its processes did'].map((x) => h('th', null, x)))));
  const tb = h('tbody');
  steps.forEach((s, i) => {
    const waited = i === 0 ? '–' : s.shuffle_wait_s ? 'shuffle ' + fmt.dur(s.shuffle_wait_s * 1000) : fmt.dur(s.gap_s * 1000);
    tb.appendChild(h('tr', { 'data-attempt': s.attempt_id, class: s.cause ? 'outlier' : null },
      h('td.mono', null, h('a', { href: attemptURL(jobID, s.attempt_id) }, s.attempt_id)), h('td', null, typeBadge(s.type)), h('td.num', null, String(s.wave)),
      h('td', null, h('a', { href: hostURL(s.host) }, s.host)), h('td', null, fmt.shortTime(ms(s.start))), h('td.num', null, fmt.dur(s.duration_s * 1000)),
      h('td.num', null, waited), h('td.num', null, fmt.pct(s.cpu_percent)), h('td.num', null, fmt.pct(s.gc_percent)), h('td.num', null, fmt.pct(s.sched_wait_percent)),
      h('td.num', null, fmt.pct(s.off_cpu_percent)), h('td', null, s.note)));
  });
  t.appendChild(tb);
  card.appendChild(h('div.scroll-x', null, t));
  const waves = p.waves ?? [];
  if (waves.length) {
    const wt = h('table.mini', { 'data-table': 'waves' });
    wt.appendChild(h('thead', null, h('tr', null, ...['type', 'attempts', 'containers', 'waves', 'last wave', 'full', 'idle', 'median', 'last wave is'].map((x) => h('th', null, x)))));
    const wb = h('tbody');
    for (const w of waves) {
      wb.appendChild(h('tr', { 'data-kind': w.last_wave_kind }, h('td', null, typeBadge(w.task_type), w.vertex ? ' vertex ' + w.vertex : ''), h('td.num', null, fmt.num(w.attempts)), h('td.num', null, fmt.num(w.slots)),
        h('td.num', null, fmt.num(w.waves)), h('td.num', null, fmt.num(w.last_wave_attempts)), h('td.num', null, fmt.pct(w.last_wave_fill_percent)),
        h('td.num', null, fmt.pct(w.idle_percent)), h('td.num', null, fmt.dur(w.median_duration_s * 1000)),
        h('td', { class: w.last_wave_kind === 'full' ? null : 'warn' }, w.last_wave_kind === 'partial' ? 'badly filled' : w.last_wave_kind === 'straggler' ? 'a straggler' : 'full')));
    }
    wt.appendChild(wb);
    card.append(h('h4', null, 'Waves per task type'), wt);
  }
  const whatIf = p.what_if ?? [];
  if (whatIf.length) {
    card.append(h('h4', null, 'What if (the measured durations replayed through the containers)'),
      h('ul.what-if', { 'data-list': 'what-if' }, ...whatIf.map((w) => h('li', { 'data-kind': w.kind }, w.text))));
  }
}

// outcomeLabel names an attempt's outcome in the summary's table.
function outcomeLabel(a: Attempt): string {
  const k = outcomeKey(a);
  return k === 'running' || k === 'unknown' ? k : outcomeText(k);
}
const OUTCOME_ORDER = ['running', 'succeeded', 'failed', 'killed', 'killed: memory', 'lost', 'unknown'];

function numberName(n: string): string {
  return n.replace(/_/g, ' ');
}

export function renderFindings(card: HTMLElement, f: Findings | null, jobID: string): void {
  clear(card);
  const list = f?.findings ?? [];
  const real = list.filter((x) => x.severity !== 'none');
  card.append(h('div.card-head', null, h('h2', null, 'Findings'), h('span.spacer'),
    f ? h('span.muted', null, real.length ? `worst: ` : 'nothing to report', real.length ? sevBadge(f.worst) : '', f.evaluated ? ` · analysed ${fmt.shortTime(ms(f.evaluated))}` : '') : h('span.muted', null, 'analysis unavailable')));
  if (!real.length) {
    card.classList.add('quiet');
    return;
  }
  card.classList.remove('quiet');
  const ul = h('ul.findings');
  for (const x of real) ul.appendChild(findingItem(x, jobID));
  card.appendChild(ul);
}

function findingItem(x: Finding, jobID: string): HTMLElement {
  const li = h('li.finding.sev-' + x.severity.replace(/[^a-z]/g, ''), { 'data-heuristic': x.heuristic });
  li.append(h('div.f-head', null, sevBadge(x.severity), h('span.f-h', null, x.heuristic.replace(/_/g, ' ')), x.task_type ? typeBadge(x.task_type) : ''),
    h('p.f-msg', null, x.message));
  if (x.recommendation || x.parameter) {
    li.appendChild(h('p.f-rec', null, h('span.f-arrow', null, '→ '), x.recommendation, x.parameter ? h('code.param', { title: 'the setting to change, with its recommended value' }, `${x.parameter}=${x.value ?? ''}`) : ''));
  }
  const nums = x.numbers ?? [];
  if (nums.length) {
    li.appendChild(h('div.f-nums', null, ...nums.map((n) => h('span.f-num', null, h('span.muted', null, numberName(n.name) + ' '), h('b', null, fmt.unit(n.value, n.unit))))));
  }
  const ids = x.attempt_ids ?? [];
  if (ids.length) {
    const box = h('div.f-atts', null, h('span.muted', null, ids.length === 1 ? 'attempt: ' : `${ids.length} attempts: `));
    for (const id of ids.slice(0, 6)) box.append(h('a.mono', { href: attemptURL(jobID, id) }, id), ' ');
    if (ids.length > 6) box.append(h('span.muted', null, `and ${ids.length - 6} more`));
    li.appendChild(box);
  }
  return li;
}

