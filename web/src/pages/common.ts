// Pieces several pages share.
import { h } from '../dom';
import * as fmt from '../fmt';
import { attemptURL, type Attempt } from '../api';

export function kv(items: [string, Node | string, string?][]): HTMLElement {
  const dl = h('dl.kv');
  for (const [k, v, title] of items) {
    dl.appendChild(h('dt', null, k));
    dl.appendChild(h('dd', { title: title ?? (typeof v === 'string' ? v : undefined) }, v));
  }
  return dl;
}

export function stateBadge(state: string): HTMLElement {
  return h('span.badge.state-' + state.replace(/[^a-z_-]/gi, ''), null, state);
}

// outcomeText names an outcome for people.
export function outcomeText(o: string | undefined): string {
  switch (o) {
    case 'killed_memory':
      return 'killed: memory';
    case undefined:
    case '':
      return '–';
  }
  return o;
}

// outcomeColor is an outcome's colour on the timeline and in its legend.
export const outcomeColor: Record<string, string> = {
  succeeded: '#3a9d5d', failed: '#c8423b', killed: '#e8892b', killed_memory: '#8a5cc7', lost: '#7d8791', running: '#3b6fd4', unknown: '#b9c0c9',
};

// outcomeKey is what the timeline colours an attempt by: its outcome,
// 'running' while it runs, 'unknown' when its end was not seen.
export function outcomeKey(a: Attempt): string {
  if (a.outcome) return a.outcome;
  return a.state === 'running' ? 'running' : 'unknown';
}

export function outcomeBadge(o: string | undefined): HTMLElement {
  return h('span.badge.outcome-' + (o || 'none').replace(/[^a-z_-]/gi, ''), null, outcomeText(o));
}

// exitText is an attempt's exit code as the node showed it, and where from.
export function exitText(a: Attempt): string {
  return a.exit_code == null ? '–' : String(a.exit_code);
}

export function exitTitle(a: Attempt): string {
  if (a.exit_code == null) return 'no exit status seen';
  const from: Record<string, string> = {
    nodemanager: "the NodeManager's exit status for the container", exit_code_file: "the container's exit-code file",
    container_root: "the container's top process", task_jvm: 'the task JVM',
    task_log: "the task's own log (Hadoop 1: 0 = it said it was done, 1 = it logged its failure)",
  };
  let t = `exit code ${a.exit_code}, from ${from[a.exit_source ?? ''] ?? a.exit_source}`;
  if (a.exit_code > 128 && a.exit_code < 160) t += ` (signal ${a.exit_code - 128})`;
  if (a.exit_diagnostics) t += '\n' + a.exit_diagnostics;
  return t;
}

// cpuText is an attempt's CPU time, with how far off it may be when it is
// an estimate ("55.0s ±1.2s": cpu_doubt_ms).
export function cpuText(a: Attempt): string {
  return fmt.dur(a.cpu_ms) + (a.cpu_doubt_ms ? ' ±' + fmt.dur(a.cpu_doubt_ms) : '');
}

// cpuDoubtTitle says why an attempt's CPU is an estimate ('' when it is not).
export function cpuDoubtTitle(a: Attempt): string {
  if (!a.cpu_doubt_ms) return '';
  return `An estimate, off by up to ${fmt.dur(a.cpu_doubt_ms)} either way: an exit record was lost, so what its processes ` +
    'used last, or its share of what the node knew only in sum for containers that ended with it, is a guess.';
}

// repeatsCell shows the attempt a retry or a speculative copy repeats, as
// a link to it named by its attempt number.
export function repeatsCell(a: Attempt, td: HTMLElement): void {
  if (!a.retry_of) {
    td.textContent = '';
    return;
  }
  const n = a.retry_of.slice(a.retry_of.lastIndexOf('_'));
  td.append(h('span.muted', null, a.speculative ? 'copy of ' : 'retry of '), h('a.mono', { href: attemptURL(a.job_id, a.retry_of), title: a.retry_of }, n));
}

export function sevBadge(sev: string): HTMLElement {
  return h('span.badge.sev-' + sev.replace(/[^a-z]/gi, ''), null, sev);
}

// severities, from the least to the worst (the API's names).
export const severities = ['none', 'low', 'moderate', 'severe', 'critical'];

// sevRank orders severities: -1 for a job not analysed yet.
export function sevRank(sev: string | null | undefined): number {
  return sev ? severities.indexOf(sev) : -1;
}

// worstCell shows a job's worst severity (a badge), or that it was not
// analysed yet, then the heuristics found.
export function worstCell(sev: string | null | undefined, heuristics: string[] | null | undefined, td: HTMLElement): void {
  td.setAttribute('data-severity', sev ?? '');
  if (!sev) {
    td.append(h('span.muted', { title: 'not analysed yet' }, '–'));
    return;
  }
  td.append(sevBadge(sev));
  if (heuristics?.length) td.append(' ', h('span.heurs', null, heuristics.join(', ')));
}

export function typeBadge(t: string): HTMLElement {
  return h('span.badge.type-' + t.replace(/[^a-z0-9_-]/gi, ''), null, t);
}

export function roleBadge(r: string): HTMLElement {
  return h('span.badge.role-' + r.replace(/[^a-z0-9_-]/gi, ''), null, r || '?');
}

// byType returns "40 map · 5 reduce · 1 am".
export function byTypeText(m: Record<string, number> | null | undefined): string {
  if (!m) return '';
  const order = ['am', 'map', 'reduce', 'tez', 'executor'];
  return Object.entries(m).sort((a, b) => (order.indexOf(a[0]) + 10) % 15 - (order.indexOf(b[0]) + 10) % 15 || a[0].localeCompare(b[0]))
    .map(([t, n]) => `${n} ${t}`).join(' · ');
}

// typeStateTable counts attempts by type and state (or by another key of
// theirs, in the order given).
export function typeStateTable(atts: Attempt[], key: (a: Attempt) => string = (a) => a.state, order?: string[]): HTMLElement {
  const types = new Map<string, Map<string, number>>();
  const states = new Set<string>();
  for (const a of atts) {
    let m = types.get(a.type);
    if (!m) types.set(a.type, (m = new Map()));
    const k = key(a);
    m.set(k, (m.get(k) ?? 0) + 1);
    states.add(k);
  }
  const st = order ? order.filter((s) => states.has(s)) : [...states].sort();
  const t = h('table.mini');
  t.appendChild(h('thead', null, h('tr', null, h('th', null, 'type'), ...st.map((s) => h('th.num', null, s)), h('th.num', null, 'all'))));
  const tb = h('tbody');
  for (const [ty, m] of [...types].sort((a, b) => b[1].size - a[1].size || a[0].localeCompare(b[0]))) {
    let all = 0;
    for (const v of m.values()) all += v;
    tb.appendChild(h('tr', null, h('td', null, typeBadge(ty)), ...st.map((s) => h('td.num', null, m.get(s) ? fmt.num(m.get(s)!) : '')), h('td.num', null, fmt.num(all))));
  }
  t.appendChild(tb);
  return t;
}

export function section(parent: HTMLElement, title: string, extra?: Node): HTMLElement {
  const s = h('section.card', null, h('div.card-head', null, h('h2', null, title), h('span.spacer'), extra ?? null));
  parent.appendChild(s);
  return s;
}

export function grid(parent: HTMLElement, cls = ''): HTMLElement {
  const g = h('div.grid' + (cls ? '.' + cls : ''));
  parent.appendChild(g);
  return g;
}

export function figure(label: string, value: string, sub?: string, title?: string): HTMLElement {
  return h('div.fig', { title }, h('div.fig-v', null, value), h('div.fig-l', null, label), sub ? h('div.fig-s', null, sub) : null);
}

// lanes assigns each interval a lane so that intervals of a lane do not
// overlap (greedy by start); it returns the lane per index and the count.
export function lanes(items: { t0: number; t1: number }[]): { lane: number[]; count: number } {
  const idx = items.map((_, i) => i).sort((a, b) => items[a].t0 - items[b].t0);
  const ends: number[] = [];
  const lane = new Array<number>(items.length);
  for (const i of idx) {
    let l = ends.findIndex((e) => e <= items[i].t0);
    if (l < 0) {
      l = ends.length;
      ends.push(0);
    }
    ends[l] = items[i].t1;
    lane[i] = l;
  }
  return { lane, count: Math.max(1, ends.length) };
}
