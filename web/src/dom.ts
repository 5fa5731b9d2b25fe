// DOM helpers. Everything the API returns is untrusted (command lines come
// from arbitrary processes): text goes in through textContent and attributes
// through setAttribute, never through innerHTML.

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | null | undefined | ((ev: Event) => void)>;

// h creates an element: h('a.link', {href: '/x'}, 'text', child, ...).
export function h<K extends keyof HTMLElementTagNameMap>(tag: K | `${K}.${string}`, attrs?: Attrs | null, ...children: Child[]): HTMLElementTagNameMap[K];
export function h(tag: string, attrs?: Attrs | null, ...children: Child[]): HTMLElement;
export function h(tag: string, attrs?: Attrs | null, ...children: Child[]): HTMLElement {
  const [name, ...classes] = tag.split('.');
  const el = document.createElement(name);
  if (classes.length) el.className = classes.join(' ');
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (typeof v === 'function') el.addEventListener(k.replace(/^on/, ''), v as EventListener);
      else if (k === 'class') el.className += (el.className ? ' ' : '') + v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, ...children);
  return el;
}

export function append(el: Node, ...children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === 'object' ? c : document.createTextNode(String(c)));
  }
}

export function clear(el: Node): void {
  while (el.firstChild) el.removeChild(el.firstChild);
}

// text shows untrusted text. The agent escapes invalid UTF-8 and NULs as
// \xNN; those escapes are set apart (class "esc") so that they are not read
// as part of the command, still as plain text nodes.
export function rawText(s: string): DocumentFragment {
  const f = document.createDocumentFragment();
  const re = /\\x[0-9a-fA-F]{2}/g;
  let last = 0;
  for (let m = re.exec(s); m; m = re.exec(s)) {
    if (m.index > last) f.appendChild(document.createTextNode(s.slice(last, m.index)));
    const sp = document.createElement('span');
    sp.className = 'esc';
    sp.title = 'byte 0x' + m[0].slice(2) + ' (not valid UTF-8 text, escaped by the agent)';
    sp.textContent = m[0];
    f.appendChild(sp);
    last = m.index + m[0].length;
  }
  if (last < s.length) f.appendChild(document.createTextNode(s.slice(last)));
  return f;
}

export function download(name: string, blob: Blob): void {
  const url = URL.createObjectURL(blob);
  const a = h('a', { href: url, download: name });
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// safeName turns an id into a file name.
export function safeName(s: string): string {
  return s.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 120);
}
