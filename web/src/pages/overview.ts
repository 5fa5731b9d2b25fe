// The overview, the first page: what is in trouble now (the running jobs,
// the worst findings first), the recurring jobs that regressed in the last
// 24 hours, what those 24 hours cost by queue and by user (core-hours, GB-hours and what was
// wasted) with their jobs' findings by severity, and the hosts with lost
// or orphaned task processes; all of the jobs the reader sees, live.
import { h, clear, append } from '../dom';
import * as fmt from '../fmt';
import { get, Overview, OverviewGroup, Job, JobFinding, ms, jobURL, hostURL, historyURL } from '../api';
import { Ctx } from '../nav';
import { refresher } from '../live';
import { figure, section, stateBadge, byTypeText, sevBadge, severities, worstCell } from './common';

// The most rows a table of the overview shows (the rest: a link).
const ROWS = 15;

// The window of the overview's figures: the last 24 hours, not the
// calendar day, so that just after midnight the page still shows the
// night's jobs (and the links to the jobs list ask for the same window).
const DAY = 24 * 3600 * 1000;

function dayAgo(): number {
  return Date.now() - DAY;
}

function jobsLink(param: string, value: string, more: Record<string, string> = {}): string {
  return '/jobs?' + new URLSearchParams({ [param]: value, from: String(dayAgo()), ...more }).toString();
}

// sevCounts shows a group's jobs by their worst severity, moderate and
// worse, each a link to those jobs of the group in the last 24 hours.
function sevCounts(param: string, key: string, counts: Record<string, number> | null | undefined): HTMLElement {
  const td = h('td.sevs');
  for (const s of severities.slice(2).reverse()) {
    const n = counts?.[s] ?? 0;
    if (!n) continue;
    td.append(h('a.badge.sev-' + s, { href: jobsLink(param, key, { min_severity: s, sort: 'severity' }), 'data-severity': s, title: `${n} ${n === 1 ? 'job' : 'jobs'} at worst ${s}` }, `${fmt.num(n)} ${s}`), ' ');
  }
  if (!td.firstChild) td.append(h('span.muted', null, counts ? 'none' : '–'));
  return td;
}

// heuristicLinks are a job's heuristics, each a link to the running jobs
// with a finding of it.
function heuristicLinks(names: string[] | null | undefined): Node[] {
  const out: Node[] = [];
  for (const n of names ?? []) {
    if (out.length) out.push(document.createTextNode(' · '));
    out.push(h('a.heur', { href: '/jobs?' + new URLSearchParams({ state: 'running', heuristic: n, sort: 'severity' }).toString(), 'data-heuristic': n }, n.replace(/_/g, ' ')));
  }
  return out;
}

function more(n: number, shown: number, href: string, what: string): HTMLElement | null {
  return n > shown ? h('p.small.muted', null, `${fmt.num(n - shown)} more ${what}: `, h('a', { href }, 'all of them')) : null;
}

function groupTable(name: string, param: string, groups: OverviewGroup[]): HTMLElement {
  const t = h('table', { 'data-table': name });
  t.appendChild(h('thead', null, h('tr', null, h('th', null, param === 'queue' ? 'Queue' : 'User'), h('th.num', null, 'Jobs'), h('th.num', { title: 'CPU allocated: a core per container over its life' }, 'Core-hours'),
    h('th.num', { title: 'Memory allocated: memory.mb over each container\'s life' }, 'GB-hours'),
    h('th.num', { title: 'Core-hours of failed, killed and speculative attempts: their work was thrown away' }, 'Wasted core-h'),
    h('th.num', { title: 'GB-hours of failed, killed and speculative attempts' }, 'Wasted GB-h'),
    h('th.num', { title: 'Memory allocated beyond what the other attempts used' }, 'Over-allocated'),
    h('th.num', { title: 'Of what was allocated, the share thrown away' }, 'Wasted'),
    h('th', { title: 'Jobs by the worst severity of their findings (moderate and worse)' }, 'Findings'))));
  const tb = h('tbody');
  for (const g of groups.slice(0, ROWS)) {
    tb.appendChild(h('tr', { 'data-key': g.key },
      h('td', null, h('a', { href: jobsLink(param, g.key) }, g.key || '–')),
      h('td.num', null, fmt.num(g.jobs)),
      h('td.num', null, g.cpu_hours.toFixed(2)),
      h('td.num', null, fmt.gbh(g.memory_gb_hours)),
      h('td.num', { class: g.wasted_cpu_hours > 0 ? 'warn' : null }, g.wasted_cpu_hours.toFixed(2)),
      h('td.num', { class: g.wasted_memory_gb_hours > 0 ? 'warn' : null }, fmt.gbh(g.wasted_memory_gb_hours)),
      h('td.num', null, fmt.gbh(g.over_allocated_gb_hours)),
      h('td.num', { class: g.wasted_percent >= 10 ? 'warn' : null }, fmt.pct(g.wasted_percent, 1)),
      sevCounts(param, g.key, g.severity_counts)));
  }
  t.appendChild(tb);
  return t;
}

// runningTable: the running jobs as the API orders them, the worst
// finding first.
function runningTable(jobs: Job[]): HTMLElement {
  const t = h('table', { 'data-table': 'running' });
  t.appendChild(h('thead', null, h('tr', null, h('th', { title: 'The worst severity of its findings (– : not analysed yet)' }, 'Severity'), h('th', null, 'Job'), h('th', null, 'Name'), h('th', null, 'User'), h('th', null, 'Queue'),
    h('th', { title: 'The heuristics that found something: the running jobs with such a finding' }, 'Findings'),
    h('th', null, 'State'), h('th.num', null, 'Running for'), h('th', null, 'Attempts by type'), h('th.num', null, 'CPU'), h('th.num', null, 'Mem alloc'))));
  const tb = h('tbody');
  for (const j of jobs.slice(0, ROWS)) {
    const sev = h('td');
    worstCell(j.worst_severity, null, sev);
    tb.appendChild(h('tr', { 'data-job': j.job_id, 'data-severity': j.worst_severity ?? '' },
      sev,
      h('td.mono', null, h('a', { href: jobURL(j.job_id) }, j.job_id)),
      h('td.name', { title: j.name }, j.name),
      h('td', null, j.user), h('td', null, j.queue),
      h('td.heurs', null, ...heuristicLinks(j.heuristics)),
      h('td', null, stateBadge(j.running ? 'running' : j.state)),
      h('td.num', null, fmt.dur(Date.now() - ms(j.start))),
      h('td', null, byTypeText(j.attempts_by_type)),
      h('td.num', null, fmt.cpuHours(j.cpu_ms)),
      h('td.num', null, fmt.gbh(j.memory_gb_hours))));
  }
  t.appendChild(tb);
  return t;
}

// regressedTable: the runs of recurring jobs outside their band, with
// the measures that are and by how much.
function regressedTable(fs: JobFinding[]): HTMLElement {
  const t = h('table', { 'data-table': 'regressed' });
  t.appendChild(h('thead', null, h('tr', null, h('th', null, 'Severity'), h('th', null, 'Job'), h('th', null, 'Name'), h('th', null, 'User'), h('th', null, 'Queue'),
    h('th', { title: 'The measures above the band of the runs before it: this run against their median' }, 'Above its band'), h('th', null, 'Started'), h('th', null, 'Runs'))));
  const tb = h('tbody');
  for (const f of fs.slice(0, ROWS)) {
    const ratios = (f.numbers ?? []).filter((n) => n.name.endsWith('_ratio')).map((n) => `${n.name.slice(0, -6).replace(/_/g, ' ')} ${n.value.toFixed(2)}×`);
    tb.appendChild(h('tr', { 'data-job': f.job_id, 'data-severity': f.severity },
      h('td', null, sevBadge(f.severity)),
      h('td.mono', null, h('a', { href: jobURL(f.job_id) }, f.job_id)),
      h('td.name', { title: f.job_name }, f.job_name),
      h('td', null, f.user), h('td', null, f.queue),
      h('td', { title: f.message }, ratios.join(' · ') || '–'),
      h('td', null, f.job_start ? fmt.shortTime(ms(f.job_start)) : '–'),
      h('td', null, h('a', { href: historyURL(f.job_id) }, 'history'))));
  }
  t.appendChild(tb);
  return t;
}

function hostsTable(hosts: Overview['hosts']): HTMLElement {
  const t = h('table', { 'data-table': 'lost-hosts' });
  t.appendChild(h('thead', null, h('tr', null, h('th', null, 'Host'),
    h('th.num', { title: 'Task processes their framework lost: a Child JVM its TaskTracker no longer counts, a container its NodeManager no longer knows, a task that outlived its job' }, 'Lost'),
    h('th.num', { title: 'Task processes whose launcher (NodeManager or TaskTracker) died' }, 'Orphaned'),
    h('th.num', { title: 'Of those, ended by the agent (--reap-orphans)' }, 'Ended by the agent'),
    h('th.num', null, 'Jobs'), h('th', null, 'Last'))));
  const tb = h('tbody');
  for (const x of (hosts ?? []).slice(0, ROWS)) {
    const left = x.lost + x.orphaned - x.reaped;
    tb.appendChild(h('tr', { 'data-host': x.host },
      h('td', null, h('a', { href: hostURL(x.host) }, x.host)),
      h('td.num', { class: x.lost ? 'warn' : null }, fmt.num(x.lost)),
      h('td.num', { class: x.orphaned ? 'warn' : null }, fmt.num(x.orphaned)),
      h('td.num', { title: left > 0 ? `${left} not ended` : 'all ended' }, fmt.num(x.reaped)),
      h('td.num', null, fmt.num(x.jobs)),
      h('td', null, fmt.shortTime(ms(x.last)) + ' (' + fmt.ago(ms(x.last)) + ')')));
  }
  t.appendChild(tb);
  return t;
}

export async function overviewPage(c: Ctx): Promise<void> {
  const root = c.root;
  document.title = 'Overview · taskscope';
  root.appendChild(h('div.page-head', null, h('h1', null, 'Overview'), h('span.sub', null, 'what is in trouble now, and what the last 24 hours cost')));
  const figs = h('section.card', { 'data-section': 'overview-figures' });
  const body = h('div');
  root.append(figs, body);

  const load = async (): Promise<void> => {
    const from = dayAgo();
    const o = await get<Overview>('/api/v1/overview?from=' + from, c.signal);
    const queues = o.queues ?? [];
    const users = o.users ?? [];
    const hosts = o.hosts ?? [];
    let cpu = 0, wasted = 0, jobs = 0;
    for (const g of queues) {
      cpu += g.cpu_hours;
      wasted += g.wasted_cpu_hours;
      jobs += g.jobs;
    }
    const left = hosts.reduce((n, x) => n + x.lost + x.orphaned - x.reaped, 0);
    clear(figs);
    figs.append(h('div.figs', null,
      figure('running now', fmt.num(o.running_total), 'jobs'),
      figure('jobs, 24 h', fmt.num(jobs), o.truncated ? 'the first of more' : 'since ' + fmt.shortTime(from)),
      figure('core-hours, 24 h', cpu.toFixed(2), wasted.toFixed(2) + ' thrown away', 'a core per container over its life; thrown away: failed, killed and speculative attempts'),
      figure('lost task processes', fmt.num(left), hosts.length + (hosts.length === 1 ? ' host' : ' hosts') + ' in 24 h', 'lost or orphaned, not ended by the agent')));
    clear(body);
    const running = section(body, 'Running now, the worst first', h('a.button', { href: '/jobs?state=running&sort=severity' }, 'All running jobs'));
    running.setAttribute('data-section', 'running');
    const rj = o.running ?? [];
    append(running, rj.length ? h('div', null, runningTable(rj)) : h('p.empty', null, 'No job runs now.'), more(o.running_total, Math.min(rj.length, ROWS), '/jobs?state=running&sort=severity', 'running jobs'));
    const reg = o.regressed ?? [];
    const rg = section(body, 'Recurring jobs that regressed in the last 24 hours', h('a.button', { href: '/jobs?' + new URLSearchParams({ heuristic: 'recurring', from: String(from), sort: 'severity' }).toString() }, 'All of them'));
    rg.setAttribute('data-section', 'regressed');
    append(rg, reg.length ? regressedTable(reg) : h('p.empty', null, 'No run of a recurring job outside its band in the last 24 hours.'),
      more(o.regressed_total ?? reg.length, Math.min(reg.length, ROWS), '/jobs?' + new URLSearchParams({ heuristic: 'recurring', from: String(from), sort: 'severity' }).toString(), 'regressed runs'));
    const q = section(body, 'Queues, the last 24 hours', h('a.button', { href: '/waste?by=queue&from=-24h' }, 'Waste by queue'));
    q.setAttribute('data-section', 'queues');
    append(q, queues.length ? groupTable('queues', 'queue', queues) : h('p.empty', null, 'No job in the last 24 hours.'), more(queues.length, ROWS, '/waste?by=queue&from=-24h', 'queues'));
    const u = section(body, 'Users, the last 24 hours', h('a.button', { href: '/waste?by=user&from=-24h' }, 'Waste by user'));
    u.setAttribute('data-section', 'users');
    append(u, users.length ? groupTable('users', 'user', users) : h('p.empty', null, 'No job in the last 24 hours.'), more(users.length, ROWS, '/waste?by=user&from=-24h', 'users'));
    const lh = section(body, 'Lost and orphaned task processes, the last 24 hours');
    lh.setAttribute('data-section', 'lost');
    append(lh, hosts.length ? hostsTable(hosts) : h('p.empty', null, 'None in the last 24 hours.'), more(hosts.length, ROWS, '/hosts', 'hosts'));
  };
  c.onCleanup(refresher(load, () => 5000));
  await load();
}
