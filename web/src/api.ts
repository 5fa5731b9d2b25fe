// The REST API's JSON shapes (internal/store/store.go, internal/analysis)
// and how to fetch them.

export interface Job {
  job_id: string;
  app_id?: string;
  framework: string;
  name: string;
  user: string;
  queue: string;
  state: string;
  start: string | null;
  end: string | null;
  last_seen: string | null;
  attempts: number;
  running: number;
  attempts_by_type: Record<string, number> | null;
  hosts: number;
  cpu_ms: number;
  peak_rss_bytes: number;
  memory_gb_hours: number;
  used_memory_gb_hours: number;
  // The worst severity of its stored findings (null: not analysed yet)
  // and the heuristics of those of low severity or worse.
  worst_severity?: string | null;
  heuristics?: string[] | null;
}

// severity_counts: the jobs matching all but min_severity, by their worst
// severity, and not_analysed.
export interface JobPage { jobs: Job[]; total: number; severity_counts?: Record<string, number> | null }

export interface Attempt {
  attempt_id: string;
  job_id: string;
  host: string;
  container_id: string;
  app_id?: string;
  type: string;
  framework: string;
  state: string;
  start: string | null;
  end: string | null;
  last_seen: string | null;
  duration_ms: number;
  cpu_ms: number;
  cpu_doubt_ms?: number; // cpu_ms is an estimate, off by up to this (a split by a guess)
  peak_rss_bytes: number;
  peak_pss_bytes: number;
  peak_vms_bytes: number;
  peak_heap_bytes: number;
  processes: number;
  read_bytes: number;
  write_bytes: number;
  gc_time_ms: number;
  sched_wait_ms: number;
  memory_mb: number;
  xmx_bytes: number;
  java_opts?: string;
  streaming: boolean;
  job_name?: string;
  user?: string;
  queue?: string;
  // How it ended (docs/api.md): succeeded, failed, killed, killed_memory,
  // lost, or '' while it runs or when nothing of its end was seen.
  outcome?: string;
  exit_code?: number | null;
  exit_source?: string;
  exit_diagnostics?: string;
  retry_of?: string;
  speculative?: boolean;
  // Parsed by the UI.
  t0?: number;
  t1?: number;
}

export interface JobDetail extends Job { attempt_list: Attempt[] | null }

export interface Proc {
  key: string;
  host: string;
  pid: number;
  ppid: number;
  sid: number;
  start: string | null;
  end: string | null;
  last_seen: string | null;
  cmdline: string;
  comm: string;
  role: string;
  user: string;
  cpu_ms: number;
  children_cpu_ms: number;
  peak_rss_bytes: number;
  peak_pss_bytes: number;
  peak_vms_bytes: number;
  max_threads: number;
  read_bytes: number;
  write_bytes: number;
  samples: number;
  member_from: string | null;
  member_to: string | null;
  member_cpu_base_ms: number;
}

export interface TSEvent {
  time: string | null;
  host: string;
  kind: string;
  job_id?: string;
  attempt_id?: string;
  process?: string;
  pid?: number;
  message?: string;
  value?: number;
}

export interface AttemptDetail extends Attempt { process_list: Proc[] | null; events: TSEvent[] | null }

export interface FindingNumber { name: string; value: number; unit: string }

export interface Finding {
  heuristic: string;
  severity: string;
  task_type?: string;
  attempt_ids: string[] | null;
  message: string;
  recommendation: string;
  parameter?: string;
  value?: string;
  cause?: string;
  numbers: FindingNumber[] | null;
}

// The critical path, waves and what-ifs (package analysis, critical.go).
export interface PathStep {
  attempt_id: string; type: string; host: string; start: string | null; end: string | null; wave: number;
  gap_s: number; shuffle_wait_s?: number; duration_s: number; cpu_percent: number; gc_percent: number;
  sched_wait_percent: number; off_cpu_percent: number; read_bytes: number; write_bytes: number; peak_rss_bytes: number;
  cause?: string; note: string;
}
export interface Waves {
  task_type: string; vertex?: string; attempts: number; slots: number; waves: number; last_wave_attempts: number; last_wave_fill_percent: number;
  last_wave_start: string | null; end: string | null; median_duration_s: number; last_wave_kind: string; idle_percent: number;
}
export interface WhatIf { kind: string; attempt_id?: string; task_type?: string; containers?: number; end: string | null; saved_s: number; text: string }
export interface CriticalPath { start: string | null; end: string | null; duration_s: number; steps: PathStep[] | null; waves: Waves[] | null; what_if: WhatIf[] | null }

export interface Findings { job_id: string; state: string; evaluated: string | null; worst: string; findings: Finding[] | null; critical_path?: CriticalPath | null }

// A recurring job (package analysis, recurring.go).
export interface Run {
  job_id: string; name: string; state: string; start: string | null; end: string | null; duration_s: number; cpu_s: number;
  peak_rss_bytes: number; gc_percent: number; io_bytes: number; outside: string[] | null;
}
export interface Band { measure: string; unit: string; median: number; limit: number }
export interface History { name: string; user: string; queue: string; job_id: string; runs: Run[] | null; median: Band[] | null; baseline_runs: number }

// The cost of waste (package analysis, waste.go).
export interface WasteAmount { attempts: number; cpu_hours: number; memory_gb_hours: number }
export interface Cost {
  attempts: number; cpu_hours: number; used_cpu_hours: number; memory_gb_hours: number; used_memory_gb_hours: number;
  failed: WasteAmount; killed: WasteAmount; speculative: WasteAmount; over_allocated: WasteAmount; wasted_percent: number;
}
export interface WasteGroup extends Cost { key: string; jobs: number }
export interface WasteReport { by: string; from: string | null; to: string | null; jobs: number; truncated: boolean; total: Cost; groups: WasteGroup[] | null }

// GET /api/v1/overview (internal/analysis/overview.go).
export interface OverviewGroup {
  key: string;
  jobs: number;
  cpu_hours: number;
  memory_gb_hours: number;
  wasted_cpu_hours: number;
  wasted_memory_gb_hours: number;
  over_allocated_gb_hours: number;
  wasted_percent: number;
  // The group's jobs by the worst severity of their stored findings.
  severity_counts?: Record<string, number> | null;
}
// A stored finding with its job (GET /api/v1/findings).
export interface JobFinding extends Finding {
  job_id: string; job_name: string; user: string; queue: string; job_start: string | null; job_state: string; evaluated: string | null;
}
export interface LostOnHost { host: string; lost: number; orphaned: number; reaped: number; jobs: number; last: string | null }
export interface Overview {
  from: string | null;
  to: string | null;
  running: Job[] | null;
  running_total: number;
  queues: OverviewGroup[] | null;
  users: OverviewGroup[] | null;
  hosts: LostOnHost[] | null;
  // The runs of recurring jobs in the window outside their band (their
  // stored "recurring" findings), the worst first.
  regressed?: JobFinding[] | null;
  regressed_total?: number;
  truncated: boolean;
}

export interface Host {
  host: string;
  last_seen: string | null;
  running_attempts: number;
  attempts: number;
  agents: number;
  dropped_samples: number;
  orphan_events: number;
}

export interface HostDetail { host: string; from: string | null; to: string | null; attempts: Attempt[] | null; events: TSEvent[] | null }

export interface MetricSeries { metric: string; unit: string; values: (number | null)[] }

export interface Series { scope: string; step_ms: number; from_ms: number; to_ms: number; times: number[]; series: MetricSeries[] }

export class APIError extends Error {
  constructor(public status: number, message: string) {
    super(message);
  }
}

export async function get<T>(path: string, signal?: AbortSignal): Promise<T> {
  return answer<T>(await fetch(path, { signal, headers: { Accept: 'application/json' } }));
}

// answer is a response's JSON, or an APIError with the server's message.
async function answer<T>(r: Response): Promise<T> {
  if (!r.ok) {
    let msg = r.status + ' ' + r.statusText;
    try {
      const b = await r.json();
      if (b && typeof b.error === 'string') msg = b.error;
    } catch {
      // not JSON
    }
    throw new APIError(r.status, msg);
  }
  return (await r.json()) as T;
}

export function ms(t: string | null | undefined): number {
  return t ? Date.parse(t) : 0;
}

// prepare parses an attempt's times once: t0 its start, t1 its end (or last
// sample while it runs).
export function prepare(a: Attempt): Attempt {
  a.t0 = ms(a.start);
  a.t1 = ms(a.end) || ms(a.last_seen) || (a.t0 + a.duration_ms);
  return a;
}

export function seriesValues(s: Series, metric: string): (number | null)[] {
  const m = s.series.find((x) => x.metric === metric);
  return m ? m.values : s.times.map(() => null);
}

export const enc = encodeURIComponent;

export function jobURL(job: string): string {
  return '/jobs/' + enc(job);
}
export function attemptURL(job: string, att: string): string {
  return '/jobs/' + enc(job) + '/attempts/' + enc(att);
}
export function processURL(job: string, att: string, key: string): string {
  return attemptURL(job, att) + '/processes/' + enc(key);
}
export function historyURL(job: string): string {
  return '/jobs/' + enc(job) + '/history';
}
export function hostURL(host: string): string {
  return '/hosts/' + enc(host);
}

// LiveSeries is a chart's series that live updates extend: fetch(..., true)
// asks the server for the last bucket onwards only, at the width the series
// has (the buckets before it are final, and a rate's first bucket looks back
// before it: the server answers what a fetch of the whole window would), and
// splices it in; and not before a bucket's width has passed since the last
// fetch (a chart of 15 s buckets is redrawn every 15 s, not at every
// update). It fetches the whole window again when the window's start or the
// point budget changed, or when the window no longer fits the budget at
// that width (the server then picks a wider one).
export class LiveSeries {
  private last: Series | null = null;
  private key = '';
  private at = 0; // when last was fetched

  // path: the series endpoint with its metrics (and attempt), without the
  // window.
  constructor(private path: string) {}

  async fetch(from: number, to: number, points: number, signal: AbortSignal, live: boolean): Promise<Series> {
    const key = `${from}/${points}`;
    const old = this.last;
    const n = old?.times.length ?? 0;
    const sep = this.path.includes('?') ? '&' : '?';
    let s: Series;
    if (live && old && n > 0 && key === this.key && Math.ceil((to - old.from_ms) / old.step_ms) <= points) {
      if (Date.now() - this.at < old.step_ms) return old;
      const tail = await get<Series>(`${this.path}${sep}from=${old.times[n - 1]}&to=${to}&step=${old.step_ms}`, signal);
      s = spliceSeries(old, tail);
    } else {
      s = await get<Series>(`${this.path}${sep}from=${from}&to=${to}&points=${points}`, signal);
    }
    this.last = s;
    this.key = key;
    this.at = Date.now();
    return s;
  }
}

// spliceSeries is old up to where tail starts, then tail (the same metrics,
// at the same step).
export function spliceSeries(old: Series, tail: Series): Series {
  let k = old.times.findIndex((t) => t >= tail.from_ms);
  if (k < 0) k = old.times.length;
  return {
    ...tail,
    from_ms: old.from_ms,
    times: old.times.slice(0, k).concat(tail.times),
    series: tail.series.map((m, i) => ({ ...m, values: (old.series[i]?.values ?? []).slice(0, k).concat(m.values) })),
  };
}

// A stack profile of an attempt's JVM (internal/store/profile.go).
export interface ProfileInfo {
  id: string;
  attempt_id: string;
  host: string;
  pid: number;
  process: string;
  trigger: string; // request, straggler, sibling
  requested_by?: string;
  requested: string | null;
  baseline?: string;
  baseline_attempt?: string;
  window_ms: number;
  interval_ms: number;
  status: string; // requested, expired, complete, partial, failed
  error?: string;
  start: string | null;
  end: string | null;
  dumps: number;
  paused_ms: number;
  max_pause_ms: number;
  stacks: number;
  bytes: number;
}

export interface ProfileList {
  profiles: ProfileInfo[];
  may_request: boolean;
  why?: string;
  settings: { on_demand: boolean; auto: boolean; off_hosts: string[] };
}

export interface FlameNode {
  name: string;
  value: number;
  delta?: number;
  children?: FlameNode[];
}

export interface HotFrame {
  name: string;
  thread_group: string;
  self_ns: number;
  share: number;
}

export interface ProfileView {
  profile: ProfileInfo;
  cpu?: FlameNode;
  wait?: FlameNode;
  hottest?: Record<string, HotFrame[]>;
  baseline?: ProfileInfo;
  diff_cpu?: FlameNode;
  diff_wait?: FlameNode;
}

// post sends JSON (the server takes nothing else for what changes state:
// a form from another site cannot post it).
export async function post<T>(path: string, body: unknown, signal?: AbortSignal): Promise<T> {
  return answer<T>(await fetch(path, { method: 'POST', signal, headers: { Accept: 'application/json', 'Content-Type': 'application/json' }, body: JSON.stringify(body) }));
}
