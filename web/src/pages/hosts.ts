// The hosts list, and a host's page: its attempts over time and its lost or
// orphaned task processes.
import { h, clear } from '../dom';
import * as fmt from '../fmt';
import { get, Host, HostDetail, Attempt, ms, prepare, enc, hostURL, attemptURL, jobURL } from '../api';
import { Ctx } from '../nav';
import { refresher } from '../live';
import { VTable, Column } from '../vtable';
import { Chart } from '../charts';
import { section, stateBadge, typeBadge, figure } from './common';
import { attachAttemptClick, timelineOption } from './jobcharts';
import { eventsTable } from './attempt';

export async function hostsPage(c: Ctx): Promise<void> {
  const root = c.root;
  document.title = 'Hosts · taskscope';
  root.appendChild(h('div.page-head', null, h('h1', null, 'Hosts'), h('span.sub', null, 'nodes whose agents sent data')));
  const cols: Column<Host>[] = [
    { id: 'host', title: 'Host', width: 220, kind: 'text', get: (x) => x.host, href: (x) => hostURL(x.host) },
    { id: 'running', title: 'Running', width: 80, kind: 'num', get: (x) => x.running_attempts, tip: 'Attempts running now' },
    { id: 'attempts', title: 'Attempts', width: 80, kind: 'num', get: (x) => x.attempts },
    { id: 'orphans', title: 'Orphans', width: 80, kind: 'num', get: (x) => x.orphan_events, cls: (x) => (x.orphan_events ? 'warn' : ''), tip: 'Events of lost or orphaned task processes' },
    { id: 'dropped', title: 'Dropped samples', width: 120, kind: 'num', get: (x) => x.dropped_samples, cls: (x) => (x.dropped_samples ? 'warn' : '') },
    { id: 'agents', title: 'Agents', width: 64, kind: 'num', get: (x) => x.agents },
    { id: 'seen', title: 'Last data', width: 150, kind: 'time', get: (x) => ms(x.last_seen), fmt: (x) => fmt.shortTime(ms(x.last_seen)) + ' (' + fmt.ago(ms(x.last_seen)) + ')', filter: false },
  ];
  const t = new VTable<Host>(cols, { label: 'hosts', maxHeight: 700, sort: { id: 'host', desc: false } });
  t.el.setAttribute('data-table', 'hosts');
  root.appendChild(h('section.card', null, t.el));
  const load = async () => {
    const r = await get<{ hosts: Host[] | null }>('/api/v1/hosts', c.signal);
    t.setRows(r.hosts ?? []);
  };
  await load();
  c.onCleanup(refresher(load));
}

const windows: [string, string][] = [['-1h', 'last hour'], ['-6h', 'last 6 hours'], ['-24h', 'last 24 hours'], ['-168h', 'last 7 days']];

export async function hostPage(c: Ctx): Promise<void> {
  const host = c.params[0];
  const root = c.root;
  document.title = `${host} · taskscope`;
  const win = h('select', { 'aria-label': 'Time window' }, ...windows.map(([v, t]) => h('option', { value: v }, t)));
  win.value = c.query.get('from') ?? '-6h';
  root.append(h('div.crumbs', null, h('a', { href: '/hosts' }, 'Hosts'), ' / host'),
    h('div.page-head', null, h('h1', null, 'Host ', h('span.mono', null, host)), h('span.spacer'), win));
  const figs = h('div.figs');
  root.appendChild(h('section.card', null, figs));
  const tl = new Chart(root, { title: 'Attempts on this host over time', subtitle: 'host ' + host, file: `${host}-timeline`, height: 220, wide: true, note: 'one row per job, coloured by task type; click a bar to open the attempt' });
  c.onCleanup(() => tl.dispose());
  tl.card.classList.add('standalone');
  attachAttemptClick(tl, []);
  const evCard = section(root, 'Lost and orphaned task processes');
  evCard.setAttribute('data-section', 'orphans');
  const cols: Column<Attempt>[] = [
    { id: 'attempt', title: 'Attempt', width: 286, min: 272, kind: 'text', get: (a) => a.attempt_id, href: (a) => attemptURL(a.job_id, a.attempt_id), cls: () => 'mono' },
    { id: 'job', title: 'Job', width: 196, min: 172, kind: 'text', get: (a) => a.job_id, href: (a) => jobURL(a.job_id), cls: () => 'mono' },
    { id: 'type', title: 'Type', width: 72, kind: 'text', get: (a) => a.type, cell: (a, td) => td.appendChild(typeBadge(a.type)) },
    { id: 'state', title: 'State', width: 80, kind: 'text', get: (a) => a.state, cell: (a, td) => td.appendChild(stateBadge(a.state)) },
    { id: 'user', title: 'User', width: 80, kind: 'text', get: (a) => a.user ?? '' },
    { id: 'start', title: 'Start', width: 120, kind: 'time', get: (a) => a.t0!, fmt: (a) => fmt.shortTime(a.t0), filter: false },
    { id: 'dur', title: 'Duration', width: 76, kind: 'dur', get: (a) => a.duration_ms, fmt: (a) => fmt.dur(a.duration_ms) },
    { id: 'cpu', title: 'CPU', width: 76, kind: 'dur', get: (a) => a.cpu_ms, fmt: (a) => fmt.dur(a.cpu_ms) },
    { id: 'rss', title: 'Peak RSS', width: 80, kind: 'bytes', get: (a) => a.peak_rss_bytes, fmt: (a) => fmt.bytes(a.peak_rss_bytes) },
    { id: 'limit', title: 'Limit', tip: 'memory.mb', width: 76, kind: 'bytes', get: (a) => a.memory_mb * 1048576, fmt: (a) => (a.memory_mb ? fmt.bytes(a.memory_mb * 1048576) : '–') },
  ];
  const t = new VTable<Attempt>(cols, { label: 'attempts', maxHeight: 480, rowClass: (a) => (a.state === 'running' ? 'running' : '') });
  t.el.setAttribute('data-table', 'host-attempts');
  root.appendChild(h('section.card', { 'data-section': 'attempts' }, h('div.card-head', null, h('h2', null, 'Attempts')), t.el));

  const load = async () => {
    const d = await get<HostDetail>(`/api/v1/hosts/${enc(host)}?from=${enc(win.value)}`, c.signal);
    const atts = (d.attempts ?? []).map(prepare);
    const evs = d.events ?? [];
    evs.sort((a, b) => ms(a.time) - ms(b.time));
    clear(figs);
    const jobs = new Set(atts.map((a) => a.job_id));
    figs.append(figure('attempts', fmt.num(atts.length), `${atts.filter((a) => a.state === 'running').length} running`), figure('jobs', fmt.num(jobs.size)),
      figure('CPU', fmt.cpuHours(atts.reduce((s, a) => s + a.cpu_ms, 0)), 'CPU time in the window'),
      figure('lost / orphaned', fmt.num(evs.length), 'task processes', 'events of kinds orphan, lost_jvm, unknown_container, outlived_job, reap'));
    t.setRows(atts);
    const from = ms(d.from), to = ms(d.to);
    if (atts.length) {
      let t0 = Infinity, t1 = 0;
      for (const a of atts) {
        t0 = Math.min(t0, a.t0!);
        t1 = Math.max(t1, a.t1!);
      }
      t0 = Math.max(from, t0);
      t1 = Math.min(to, t1 + Math.max(1000, (t1 - t0) * 0.01));
      const o = timelineOption(atts, t0, t1, { rowKey: (a) => a.job_id });
      tl.body.style.height = Math.min(600, Math.max(140, Math.min(o.rows, 40) * 18 + 64)) + 'px';
      tl.inst?.resize();
      attachAttemptClick(tl, atts);
      tl.set(o.option);
    } else tl.empty('no attempts on this host in the window');
    clear(evCard);
    evCard.append(h('div.card-head', null, h('h2', null, 'Lost and orphaned task processes'), h('span.spacer'), h('span.muted', null, 'orphan, lost_jvm, unknown_container, outlived_job, reap')));
    evCard.appendChild(eventsTable(evs, (e) => (e.attempt_id && e.job_id && e.process ? `/jobs/${enc(e.job_id)}/attempts/${enc(e.attempt_id)}/processes/${enc(e.process)}` : null), true));
  };
  win.addEventListener('change', () => {
    history.replaceState(null, '', `${hostURL(host)}?from=${enc(win.value)}`);
    void load();
  });
  await load();
  c.onCleanup(refresher(load));
}
