// Live updates: the server sends an "update" server-sent event (with a
// counter) when new data arrived. The open page refetches what it shows.

type Listener = (version: number) => void;

const listeners = new Set<Listener>();
let es: EventSource | null = null;
let version = 0;
let statusEl: HTMLElement | null = null;

function status(text: string, cls: string, title?: string): void {
  if (!statusEl) return;
  statusEl.textContent = text;
  statusEl.className = 'live ' + cls;
  if (title) statusEl.title = title;
}

// A browser keeps at most 6 HTTP/1.1 connections to a server, over all its
// tabs; each open stream holds one. So the stream is closed while the tab is
// hidden or the page is left (the back/forward cache keeps pages), and
// opened again when it shows; the first event after reconnecting tells
// whether anything changed meanwhile.
export function startLive(el: HTMLElement): void {
  statusEl = el;
  connect();
  document.addEventListener('visibilitychange', () => (document.hidden ? disconnect() : connect()));
  window.addEventListener('pagehide', disconnect);
  window.addEventListener('pageshow', () => {
    if (!document.hidden) connect();
  });
}

function disconnect(): void {
  es?.close();
  es = null;
  status('live: paused', 'off', 'Paused while the page is hidden');
}

function connect(): void {
  if (es) return;
  es = new EventSource('/api/v1/live');
  es.addEventListener('open', () => status('live', 'on', 'Connected to /api/v1/live: pages update as data arrives'));
  es.addEventListener('error', () => status('live: reconnecting', 'off'));
  es.addEventListener('update', (ev) => {
    const v = Number((ev as MessageEvent).data) || 0;
    const changed = v !== version;
    version = v;
    const d = new Date();
    status('live', 'on', `Last update ${d.toLocaleTimeString()} (version ${v})`);
    if (!changed) return;
    for (const l of listeners) l(v);
  });
}

export function onLive(fn: Listener): () => void {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

// refresher runs fn on live updates, one at a time: an update that comes
// while fn runs makes it run once more afterwards.
// gap(), when given, is the least time between two runs (big pages).
export function refresher(fn: () => Promise<void>, gap: () => number = () => 0): () => void {
  let running = false;
  let again = false;
  let last = 0;
  let timer = 0;
  const run = async () => {
    if (running) {
      again = true;
      return;
    }
    const wait = last + gap() - Date.now();
    if (wait > 0) {
      if (!timer) timer = window.setTimeout(() => {
        timer = 0;
        void run();
      }, wait);
      return;
    }
    running = true;
    try {
      do {
        again = false;
        last = Date.now();
        await fn();
      } while (again);
    } catch (e) {
      if ((e as Error)?.name !== 'AbortError') console.warn('live refresh failed', e);
    } finally {
      running = false;
    }
  };
  const off = onLive(() => void run());
  return () => {
    off();
    clearTimeout(timer);
  };
}
