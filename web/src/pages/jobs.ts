// The jobs page: running and finished jobs with their key figures and the
// worst severity of their stored findings, filtered on the server (user,
// name, queue, state, framework, time, severity, heuristic), newest or
// worst first, with the matching jobs counted by severity; live.
import { h } from '../dom';
import * as fmt from '../fmt';
import { get, Job, JobPage, ms, jobURL, attemptURL } from '../api';
import { Ctx, showError, isAbort, navigate } from '../nav';
import { refresher } from '../live';
import { VTable, Column } from '../vtable';
import { byTypeText, stateBadge, severities, sevRank, worstCell } from './common';

const PAGE = 100;

const windows: [string, string][] = [['', 'any time'], ['-1h', 'last hour'], ['-6h', 'last 6 hours'], ['-24h', 'last 24 hours'], ['-168h', 'last 7 days'], ['custom', 'between…']];

function jobEnd(j: Job): number {
  return ms(j.end) || ms(j.last_seen) || ms(j.start);
}

export async function jobsPage(c: Ctx): Promise<void> {
  const q = c.query;
  const root = c.root;
  document.title = 'Jobs · taskscope';
  root.appendChild(h('div.page-head', null, h('h1', null, 'Jobs'), h('span.sub', null, 'running and finished, newest first')));

  // Filters, kept in the URL so that a view can be linked.
  const name = h('input', { type: 'search', placeholder: 'name contains… or a job id', title: 'Part of the job name; Enter on a job, application or attempt id opens it', 'aria-label': 'Job name', value: q.get('name') ?? '', 'data-f': 'name' });
  const user = h('input', { type: 'search', placeholder: 'user', 'aria-label': 'User', value: q.get('user') ?? '', 'data-f': 'user', size: 10 });
  const queue = h('input', { type: 'search', placeholder: 'queue', 'aria-label': 'Queue', value: q.get('queue') ?? '', 'data-f': 'queue', size: 10 });
  const state = h('select', { 'aria-label': 'State', 'data-f': 'state' },
    h('option', { value: '' }, 'any state'), h('option', { value: 'running' }, 'running'), h('option', { value: 'finished' }, 'finished'));
  state.value = q.get('state') ?? '';
  const fw = h('select', { 'aria-label': 'Framework', 'data-f': 'framework' }, h('option', { value: '' }, 'any framework'),
    ...['mapreduce', 'spark', 'tez', 'unknown'].map((f) => h('option', { value: f }, f)));
  fw.value = q.get('framework') ?? '';
  const win = h('select', { 'aria-label': 'Time', 'data-f': 'window' }, ...windows.map(([v, t]) => h('option', { value: v }, t)));
  const from = h('input', { type: 'datetime-local', 'aria-label': 'From', step: 1 });
  const to = h('input', { type: 'datetime-local', 'aria-label': 'To', step: 1 });
  const qf = q.get('from') ?? '';
  if (qf && !qf.startsWith('-')) {
    win.value = 'custom';
    from.value = toLocalInput(Number(qf) || Date.parse(qf));
    if (q.get('to')) to.value = toLocalInput(Number(q.get('to')) || Date.parse(q.get('to')!));
  } else {
    // A window of another length (a link's -3h) is kept, as it was given.
    if (qf && !windows.some(([v]) => v === qf)) win.insertBefore(h('option', { value: qf }, 'last ' + qf.slice(1)), win.lastChild);
    win.value = qf;
  }
  // By what the analysis found: the worst severity at least, a heuristic,
  // worst first.
  const sev = h('select', { 'aria-label': 'Severity at least', 'data-f': 'min_severity', title: 'Jobs whose worst finding is of this severity or worse' },
    h('option', { value: '' }, 'any severity'), ...severities.slice(1).map((v) => h('option', { value: v }, v === 'critical' ? 'critical' : v + ' or worse')));
  sev.value = q.get('min_severity') ?? '';
  const heur = h('select', { 'aria-label': 'Heuristic', 'data-f': 'heuristic', title: 'Jobs with a finding of this heuristic' }, h('option', { value: '' }, 'any finding'));
  const qh = q.get('heuristic') ?? '';
  if (qh) {
    heur.appendChild(h('option', { value: qh }, qh.replace(/_/g, ' ')));
    heur.value = qh;
  }
  const sort = h('select', { 'aria-label': 'Order', 'data-f': 'sort' }, h('option', { value: '' }, 'newest first'), h('option', { value: 'severity' }, 'worst first'));
  sort.value = q.get('sort') === 'severity' ? 'severity' : '';
  const custom = h('span.custom', null, from, ' – ', to);
  custom.hidden = win.value !== 'custom';
  const bar = h('form.filters', { role: 'search' }, name, user, queue, state, fw, win, custom, sev, heur, sort);
  // Enter on a job, application or attempt id opens it.
  bar.addEventListener('submit', (e) => e.preventDefault());
  name.addEventListener('keydown', (e) => {
    if (e.key !== 'Enter') return;
    const v = name.value.trim();
    const att = /^attempt_(\d+)_(\d+)_/.exec(v);
    if (/^(job|application)_\d+_\d+$/.test(v)) navigate(jobURL(v));
    else if (att) navigate(attemptURL(`job_${att[1]}_${att[2]}`, v));
  });
  root.appendChild(bar);

  const summary = h('div.summary');
  // The matching jobs by their worst severity: a chip filters on it.
  const chips = h('div.sev-chips', { 'data-section': 'severity-counts' });
  root.append(summary, chips);

  let offset = Number(q.get('offset') ?? 0) || 0;
  const cols: Column<Job>[] = [
    { id: 'job', title: 'Job', width: 228, min: 172, cls: () => 'mono', kind: 'text', get: (j) => j.job_id, href: (j) => jobURL(j.job_id) },
    { id: 'name', title: 'Name', width: 120, flex: true, kind: 'text', get: (j) => j.name },
    { id: 'fw', title: 'Framework', width: 92, kind: 'text', get: (j) => j.framework },
    { id: 'user', title: 'User', width: 66, kind: 'text', get: (j) => j.user },
    { id: 'queue', title: 'Queue', width: 60, kind: 'text', get: (j) => j.queue },
    { id: 'sev', title: 'Findings', width: 110, flex: true, kind: 'text', get: (j) => String(sevRank(j.worst_severity) + 1), fmt: (j) => (j.worst_severity ?? '–') + ' ' + (j.heuristics ?? []).join(', '),
      cell: (j, td) => worstCell(j.worst_severity, j.heuristics, td), tip: 'The worst severity of its findings, and the heuristics that found something (– : not analysed yet); sorts by severity' },
    { id: 'state', title: 'State', width: 76, kind: 'text', get: (j) => j.state, cell: (j, td) => td.appendChild(stateBadge(j.running && j.state === 'running' ? 'running' : j.state)) },
    { id: 'start', title: 'Start', width: 80, kind: 'time', get: (j) => ms(j.start), fmt: (j) => fmt.shortTime(ms(j.start)) },
    { id: 'dur', title: 'Duration', width: 68, kind: 'dur', get: (j) => jobEnd(j) - ms(j.start), fmt: (j) => fmt.dur(jobEnd(j) - ms(j.start)) },
    { id: 'att', title: 'Attempts by type', width: 150, kind: 'text', get: (j) => byTypeText(j.attempts_by_type), tip: 'Attempts seen, by task type' },
    { id: 'run', title: 'Running', width: 70, kind: 'num', get: (j) => j.running, fmt: (j) => (j.running ? fmt.num(j.running) : ''), tip: 'Attempts running now' },
    { id: 'cpu', title: 'CPU', width: 64, kind: 'num', get: (j) => j.cpu_ms, fmt: (j) => fmt.cpuHours(j.cpu_ms), tip: 'CPU time of all processes: core-hours (h), or a duration below one hour' },
    { id: 'mem', title: 'Mem alloc', width: 80, kind: 'num', get: (j) => j.memory_gb_hours, fmt: (j) => fmt.gbh(j.memory_gb_hours), tip: 'Memory allocated: memory.mb × duration, summed over attempts (GB-hours)' },
    { id: 'used', title: 'Mem used', width: 80, kind: 'num', get: (j) => j.used_memory_gb_hours, fmt: (j) => fmt.gbh(j.used_memory_gb_hours), tip: 'Memory used: RSS integrated over time (GB-hours)' },
    { id: 'rss', title: 'Peak RSS', width: 72, kind: 'bytes', get: (j) => j.peak_rss_bytes, fmt: (j) => fmt.bytes(j.peak_rss_bytes), tip: 'The largest attempt peak (RSS summed over its processes)' },
    { id: 'hosts', title: 'Hosts', width: 56, kind: 'num', get: (j) => j.hosts },
  ];
  const table = new VTable<Job>(cols, { label: 'jobs on this page', noFilters: true, maxHeight: Math.max(420, window.innerHeight - 230), rowClass: (j) => (j.state === 'running' ? 'running' : '') });
  table.el.setAttribute('data-table', 'jobs');
  const pager = h('div.pager');
  const card = h('section.card', null, table.el, pager);
  root.appendChild(card);

  const params = (): URLSearchParams => {
    const p = new URLSearchParams();
    for (const [k, el] of [['name', name], ['user', user], ['queue', queue], ['state', state], ['framework', fw], ['min_severity', sev], ['heuristic', heur], ['sort', sort]] as [string, HTMLInputElement | HTMLSelectElement][]) {
      if (el.value.trim()) p.set(k, el.value.trim());
    }
    if (win.value === 'custom') {
      if (from.value) p.set('from', String(new Date(from.value).getTime()));
      if (to.value) p.set('to', String(new Date(to.value).getTime()));
    } else if (win.value) p.set('from', win.value);
    return p;
  };

  let seq = 0;
  const load = async (): Promise<void> => {
    const my = ++seq;
    const p = params();
    const shown = new URLSearchParams(p);
    if (offset) shown.set('offset', String(offset));
    const url = location.pathname + (shown.toString() ? '?' + shown : '');
    if (url !== location.pathname + location.search) history.replaceState(null, '', url);
    p.set('limit', String(PAGE));
    p.set('offset', String(offset));
    const page = await get<JobPage>('/api/v1/jobs?' + p.toString(), c.signal);
    if (my !== seq) return;
    const jobs = page.jobs ?? [];
    table.setRows(jobs);
    const running = jobs.filter((j) => j.state === 'running').length;
    summary.textContent = '';
    summary.append(h('b', null, fmt.num(page.total)), ` job${page.total === 1 ? '' : 's'} match`,
      running ? h('span', null, ' · ', h('b', null, String(running)), ' running on this page') : '',
      h('span.muted', null, ' · updated ' + new Date().toLocaleTimeString()));
    showCounts(page.severity_counts);
    pager.textContent = '';
    if (page.total > PAGE) {
      const prev = h('button', { type: 'button', disabled: offset === 0 }, '← newer');
      const next = h('button', { type: 'button', disabled: offset + PAGE >= page.total }, 'older →');
      prev.addEventListener('click', () => { offset = Math.max(0, offset - PAGE); void reload(); });
      next.addEventListener('click', () => { offset += PAGE; void reload(); });
      pager.append(prev, h('span', null, ` ${fmt.num(offset + 1)}–${fmt.num(Math.min(offset + PAGE, page.total))} of ${fmt.num(page.total)} `), next);
    }
  };
  const reload = async (): Promise<void> => {
    try {
      await load();
    } catch (e) {
      if (!isAbort(e)) showError(root, e);
    }
  };
  let t = 0;
  const changed = (): void => {
    custom.hidden = win.value !== 'custom';
    offset = 0;
    clearTimeout(t);
    t = window.setTimeout(() => void reload(), 250);
  };
  for (const el of [name, user, queue]) el.addEventListener('input', changed);
  for (const el of [state, fw, win, from, to, sev, heur, sort]) el.addEventListener('change', changed);

  // showCounts shows the jobs matching all but the severity by their worst
  // severity, worst first; a chip sets the severity filter to its own
  // (those at or above the filter are marked), again unsets it.
  const showCounts = (counts: Record<string, number> | null | undefined): void => {
    chips.textContent = '';
    if (!counts) return;
    const min = sevRank(sev.value || null);
    for (const s of severities.slice().reverse()) {
      const n = counts[s] ?? 0;
      const on = sev.value !== '' && sevRank(s) >= min;
      const b = h('button.chip.sev-chip', { type: 'button', class: 'sev-' + s + (on ? ' on' : ''), 'data-severity': s, 'aria-pressed': on ? 'true' : 'false',
        title: sev.value === s ? 'Show every severity' : s === 'critical' ? 'Show the critical jobs' : `Show the jobs ${s} or worse` }, `${s} ${fmt.num(n)}`);
      b.addEventListener('click', () => {
        sev.value = sev.value === s ? '' : s;
        changed();
      });
      chips.appendChild(b);
    }
    if (counts.not_analysed) chips.appendChild(h('span.muted.small', { 'data-severity': 'not_analysed' }, `${fmt.num(counts.not_analysed)} not analysed yet`));
  };

  // The heuristics a job can be filtered by.
  void get<{ heuristics: string[] | null }>('/api/v1/heuristics', c.signal).then((r) => {
    for (const n of r.heuristics ?? []) if (n !== qh) heur.appendChild(h('option', { value: n }, n.replace(/_/g, ' ')));
  }).catch((e) => {
    if (!isAbort(e)) heur.title = 'The heuristics could not be listed: ' + String((e as Error)?.message ?? e);
  });
  c.onCleanup(() => clearTimeout(t));
  c.onCleanup(refresher(load));
  await load();
}

function toLocalInput(t: number): string {
  if (!isFinite(t)) return '';
  const d = new Date(t - new Date(t).getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 19);
}
