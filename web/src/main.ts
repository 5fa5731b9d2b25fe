import './style.css';
import { h, clear } from './dom';
import { startLive } from './live';
import { jobsPage } from './pages/jobs';
import { jobPage } from './pages/job';
import { attemptPage } from './pages/attempt';
import { processPage } from './pages/process';
import { hostsPage, hostPage } from './pages/hosts';
import { historyPage } from './pages/history';
import { wastePage } from './pages/waste';
import { overviewPage } from './pages/overview';

import { Ctx, setNavigate, showError, isAbort } from './nav';

type Page = (c: Ctx) => Promise<void> | void;

const routes: [RegExp, Page, string][] = [
  [/^\/$/, overviewPage, 'overview'],
  [/^\/jobs\/?$/, jobsPage, 'jobs'],
  [/^\/jobs\/([^/]+)\/attempts\/([^/]+)\/processes\/([^/]+)\/?$/, processPage, 'jobs'],
  [/^\/jobs\/([^/]+)\/attempts\/([^/]+)\/?$/, attemptPage, 'jobs'],
  [/^\/jobs\/([^/]+)\/history\/?$/, historyPage, 'jobs'],
  [/^\/jobs\/([^/]+)\/?$/, jobPage, 'jobs'],
  [/^\/waste\/?$/, wastePage, 'waste'],
  [/^\/hosts\/?$/, hostsPage, 'hosts'],
  [/^\/hosts\/([^/]+)\/?$/, hostPage, 'hosts'],
];

const app = document.getElementById('app')!;
let cleanups: (() => void)[] = [];
let abort: AbortController | null = null;

function notFound(c: Ctx): void {
  c.root.appendChild(h('div.card', null, h('h2', null, 'Not found'), h('p', null, 'There is no page at ' + location.pathname + '. ', h('a', { href: '/jobs' }, 'All jobs'))));
}

async function route(): Promise<void> {
  for (const f of cleanups) f();
  cleanups = [];
  abort?.abort();
  abort = new AbortController();
  clear(app);
  const path = location.pathname;
  let page: Page = notFound;
  let params: string[] = [];
  let nav = '';
  for (const [re, p, n] of routes) {
    const m = re.exec(path);
    if (m) {
      page = p;
      params = m.slice(1).map((s) => decodeURIComponent(s));
      nav = n;
      break;
    }
  }
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', (a as HTMLElement).dataset.nav === nav);
  const root = h('div.page');
  app.appendChild(root);
  const ctx: Ctx = { root, params, query: new URLSearchParams(location.search), signal: abort.signal, onCleanup: (fn) => cleanups.push(fn) };
  try {
    await page(ctx);
  } catch (e) {
    if (isAbort(e)) return;
    showError(root, e);
  }
}

function navigate(href: string, replace = false): void {
  if (replace) history.replaceState(null, '', href);
  else history.pushState(null, '', href);
  window.scrollTo(0, 0);
  void route();
}

document.addEventListener('click', (ev) => {
  if (ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
  const a = (ev.target as Element).closest('a');
  if (!a || a.target || a.hasAttribute('download')) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || url.pathname.startsWith('/api/')) return;
  ev.preventDefault();
  if (url.pathname + url.search !== location.pathname + location.search) navigate(url.pathname + url.search);
});
setNavigate(navigate);
window.addEventListener('popstate', () => void route());

startLive(document.getElementById('live')!);
void route();
