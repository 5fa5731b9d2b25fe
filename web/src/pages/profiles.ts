// The attempt page's stack profiles: where its JVM's threads spent their
// time, on a CPU and waiting, under their thread groups; for a straggler
// profiled on its own, the differential against a healthy sibling over the
// same window; the hottest frames; downloads as pprof and collapsed
// stacks. A button asks for a profile (operators and the job's owner).
import { h, clear } from '../dom';
import * as fmt from '../fmt';
import { get, post, ms, enc, attemptURL, ProfileInfo, ProfileList, ProfileView, FlameNode, HotFrame } from '../api';
import { Ctx, isAbort } from '../nav';
import { refresher } from '../live';

const TRIGGERS: Record<string, string> = {
  request: 'asked for',
  straggler: 'on its own: the analysis named the attempt a straggler',
  sibling: 'on its own: a healthy sibling of a straggler, for the differential',
};

// profilesSection fills sec for the attempt of base (its API path), and
// keeps it current while the attempt runs or a profile is awaited.
export function profilesSection(c: Ctx, sec: HTMLElement, jobID: string, base: string, running: () => boolean): void {
  const head = h('div.card-head', null, h('h2', null, 'Where the time went'), h('span.spacer'));
  const actions = h('span.profile-actions');
  head.appendChild(actions);
  const listEl = h('div.profile-list');
  const viewEl = h('div.profile-view');
  sec.append(head, listEl, viewEl);
  let list: ProfileList | null = null;
  let shown = ''; // the id of the profile shown
  let shownStatus = '';
  let asking = false;

  const pending = () => (list?.profiles ?? []).some((p) => p.status === 'requested');

  const renderActions = (): void => {
    clear(actions);
    if (!list) return;
    if (list.may_request) {
      const btn = h('button', { 'data-action': 'profile', title: 'Thread dumps of the JVM every 200 ms for 30 s (it stops for a few milliseconds at each)' },
        asking ? 'asking…' : 'Profile its JVM for 30 s') as HTMLButtonElement;
      btn.disabled = asking || pending();
      btn.addEventListener('click', () => void ask());
      actions.append(btn);
    } else if (list.why) {
      actions.append(h('span.muted.small', null, 'no profile can be asked for now: ' + list.why));
    }
  };

  const ask = async (): Promise<void> => {
    asking = true;
    renderActions();
    try {
      const p = await post<ProfileInfo>(base + '/profiles', { window_s: 30 }, c.signal);
      shown = p.id;
      await load();
    } catch (e) {
      if (!isAbort(e)) actions.append(h('span.error.small', null, String((e as Error).message)));
    } finally {
      asking = false;
      renderActions();
    }
  };

  const renderList = (): void => {
    clear(listEl);
    const ps = list?.profiles ?? [];
    if (!ps.length) {
      listEl.append(h('p.empty', null, list?.settings.auto
        ? 'No profile yet. A straggler or an outlier is profiled on its own while it runs; a running attempt can be profiled on demand.'
        : 'No profile yet.'));
      return;
    }
    const t = h('table.profiles');
    t.appendChild(h('thead', null, h('tr', null, ...['asked', 'why', 'window', 'dumps', 'JVM stopped', 'status'].map((x) => h('th', null, x)))));
    const tb = h('tbody');
    for (const p of ps) {
      const tr = h('tr', { 'data-profile': p.id, 'data-status': p.status, class: p.id === shown ? 'selected' : '' },
        h('td', null, fmt.time(ms(p.requested) || ms(p.start))),
        h('td', { title: TRIGGERS[p.trigger] ?? p.trigger }, p.trigger === 'request' ? 'asked by ' + (p.requested_by || 'someone') : p.trigger),
        h('td', null, fmt.dur(p.window_ms) + ' every ' + fmt.dur(p.interval_ms)),
        h('td.num', null, p.dumps ? fmt.num(p.dumps) : ''),
        h('td.num', null, p.dumps ? fmt.dur(p.paused_ms) : ''),
        h('td', { title: p.error ?? '' }, statusText(p)));
      tr.addEventListener('click', () => {
        shown = p.id;
        renderList();
        void show();
      });
      tb.appendChild(tr);
    }
    t.appendChild(tb);
    listEl.append(h('div.scroll-x', null, t));
  };

  const show = async (): Promise<void> => {
    const p = (list?.profiles ?? []).find((x) => x.id === shown);
    if (!p) {
      clear(viewEl);
      return;
    }
    if (p.status === shownStatus && viewEl.dataset.profile === p.id) return;
    shownStatus = p.status;
    viewEl.dataset.profile = p.id;
    clear(viewEl);
    if (p.status === 'requested' || p.status === 'expired' || p.status === 'failed') {
      viewEl.append(h('p.muted', { 'data-profile-status': p.status }, statusText(p), p.error ? ': ' + p.error : ''));
      return;
    }
    const v = await get<ProfileView>(`${base}/profiles/${enc(p.id)}`, c.signal);
    const flame = await import('../flame');
    clear(viewEl);
    viewEl.append(meta(base, v.profile));
    graphPanel(viewEl, flame, 'This JVM', v.cpu, v.wait, v.hottest, false);
    if (v.baseline) {
      const b = v.baseline;
      const title = h('span', null, 'Against a healthy sibling over the same window: ',
        h('a.mono', { href: attemptURL(jobID, b.attempt_id) }, b.attempt_id), ` on ${b.host}`);
      if (v.diff_cpu && v.diff_wait) {
        graphPanel(viewEl, flame, title, v.diff_cpu, v.diff_wait, undefined, true);
      } else {
        viewEl.append(h('h3', null, title), h('p.muted', { 'data-baseline-status': b.status }, "the sibling's profile: " + statusText(b), b.error ? ': ' + b.error : ''));
      }
    }
  };

  const load = async (): Promise<void> => {
    list = await get<ProfileList>(base + '/profiles', c.signal);
    const ps = list.profiles;
    if (!ps.some((p) => p.id === shown)) {
      const taken = ps.find((p) => p.status === 'complete' || p.status === 'partial');
      shown = (taken ?? ps[0])?.id ?? '';
    }
    renderActions();
    renderList();
    await show();
  };

  void load().catch((e) => {
    if (!isAbort(e)) listEl.append(h('p.error', null, String((e as Error).message)));
  });
  c.onCleanup(refresher(async () => {
    if (!running() && !pending()) return;
    await load();
  }));
}

function statusText(p: ProfileInfo): string {
  switch (p.status) {
    case 'requested':
      return 'asked for, not taken yet';
    case 'expired':
      return 'asked for, never taken (no agent took the request)';
    case 'partial':
      return 'cut short';
  }
  return p.status;
}

function meta(base: string, p: ProfileInfo): HTMLElement {
  const file = `${base}/profiles/${enc(p.id)}`;
  return h('div.profile-meta', null,
    h('span', null, `${statusText(p)}${p.error ? ' (' + p.error + ')' : ''}: ${fmt.num(p.dumps)} thread dumps of pid ${p.pid} on ${p.host} over ${fmt.dur(ms(p.end) - ms(p.start))}, `
      + `at most every ${fmt.dur(p.interval_ms)}; the JVM stopped ${fmt.dur(p.paused_ms)} for them (the longest ${fmt.dur(p.max_pause_ms)}). `
      + (p.trigger === 'request' ? `Asked for by ${p.requested_by || 'someone'}.` : TRIGGERS[p.trigger] ?? '')),
    h('span.downloads', null, 'download: ',
      h('a', { href: file + '?format=pprof', download: '' }, 'pprof'), ' · ',
      h('a', { href: file + '?format=collapsed&view=cpu', download: '' }, 'collapsed (CPU)'), ' · ',
      h('a', { href: file + '?format=collapsed&view=wait', download: '' }, 'collapsed (waiting)')));
}

type FlameModule = typeof import('../flame');

// graphPanel shows a pair of trees (on a CPU, waiting) with tabs, their
// thread groups' shares, and the hottest frames.
function graphPanel(parent: HTMLElement, flame: FlameModule, title: Node | string, cpu: FlameNode | undefined, wait: FlameNode | undefined,
  hottest: Record<string, HotFrame[]> | undefined, diff: boolean): void {
  const panel = h('div.flame-panel', { 'data-flame': diff ? 'diff' : 'profile' });
  const tabs = h('div.tabs');
  const groups = h('div.thread-groups');
  const graph = h('div.flame');
  const hot = h('div.hottest');
  panel.append(h('h3', null, title), tabs, groups, graph, hot);
  if (diff) {
    panel.append(h('p.muted.small', null, 'Widths are this attempt\'s time; red where it spent more than its sibling, blue where less, grey the same.'));
  }
  parent.append(panel);
  const views: [string, string, FlameNode | undefined][] = [['cpu', 'On a CPU', cpu], ['wait', 'Waiting', wait]];
  const select = (view: string): void => {
    for (const b of Array.from(tabs.children)) b.classList.toggle('active', (b as HTMLElement).dataset.view === view);
    const tree = views.find((x) => x[0] === view)?.[2];
    clear(groups);
    clear(hot);
    if (!tree || !tree.value) {
      clear(graph);
      graph.append(h('p.empty', null, view === 'cpu' ? 'No time on a CPU.' : 'No waiting.'));
      return;
    }
    const total = tree.value;
    for (const g of (tree.children ?? []).slice().sort((a, b) => b.value - a.value)) {
      groups.append(h('span.chip', { 'data-group': g.name, title: `${fmt.dur(g.value / 1e6)} of ${fmt.dur(total / 1e6)}` },
        `${g.name.replace(/^\[|\]$/g, '')} ${fmt.pct((100 * g.value) / total)}`));
    }
    flame.draw(graph, tree, { diff, wait: view === 'wait', width: parent.clientWidth - 24 });
    const frames = hottest?.[view] ?? [];
    if (frames.length) {
      const t = h('table.hottest-frames');
      t.append(h('thead', null, h('tr', null, h('th', null, view === 'cpu' ? 'hottest frames on a CPU' : 'where it waited most'), h('th', null, 'threads'), h('th.num', null, 'time'), h('th.num', null, 'share'))));
      const tb = h('tbody');
      for (const f of frames.slice(0, 10)) {
        tb.append(h('tr', { 'data-frame': f.name }, h('td.mono', null, f.name), h('td', null, f.thread_group), h('td.num', null, fmt.dur(f.self_ns / 1e6)), h('td.num', null, fmt.pct(100 * f.share, 1))));
      }
      t.append(tb);
      hot.append(t);
    }
  };
  for (const [view, label] of views) {
    const b = h('button.tab', { 'data-view': view }, label);
    b.addEventListener('click', () => select(view));
    tabs.append(b);
  }
  select('cpu');
}
