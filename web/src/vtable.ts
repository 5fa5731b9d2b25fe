// VTable is a sortable, filterable table that renders only the rows in
// view (a pool of row elements moved as one scrolls), so that 10,000 or
// 100,000 rows cost as much as 40.

import { h, clear } from './dom';
import { parseQuantity } from './fmt';

export type Kind = 'text' | 'num' | 'dur' | 'bytes' | 'time';

export interface Column<T> {
  id: string;
  title: string;
  width: number; // px
  kind: Kind;
  get: (r: T) => number | string;
  fmt?: (r: T) => string; // shown text (default: get)
  href?: (r: T) => string | null; // the cell is a link
  cls?: (r: T) => string; // extra class of the cell
  tip?: string; // header tooltip
  cell?: (r: T, td: HTMLElement) => void; // custom content (must set text itself)
  filter?: boolean; // default true
  flex?: boolean; // takes more of the width left over
  min?: number; // px its content needs (an id); the header's longest word sets it otherwise
}

export interface Options<T> {
  rowHeight?: number;
  maxHeight?: number; // px of the scroll area
  sort?: { id: string; desc: boolean };
  onRender?: (shown: number, total: number) => void;
  rowClass?: (r: T) => string;
  label: string; // for the counter: "attempts"
  noFilters?: boolean; // no filter row (the page filters on the server)
  onChange?: () => void;
}

// matcher compiles a filter: text is a substring; numbers take >5m, <1GiB,
// >=3, =2, 1m..5m (units of the column's kind).
function matcher<T>(c: Column<T>, q: string): ((r: T) => boolean) | null {
  q = q.trim();
  if (!q) return null;
  if (c.kind === 'text') {
    const neg = q.startsWith('!');
    const s = (neg ? q.slice(1) : q).toLowerCase();
    const f = c.fmt ?? ((r: T) => String(c.get(r)));
    return (r) => f(r).toLowerCase().includes(s) !== neg;
  }
  const kind = c.kind === 'dur' ? 'dur' : c.kind === 'bytes' ? 'bytes' : 'num';
  const range = /^(.+)\.\.(.+)$/.exec(q);
  if (range) {
    const lo = parseQuantity(range[1], kind), hi = parseQuantity(range[2], kind);
    if (lo === null || hi === null) return () => false;
    return (r) => {
      const v = Number(c.get(r));
      return v >= lo && v <= hi;
    };
  }
  const m = /^(>=|<=|>|<|=)?\s*(.+)$/.exec(q);
  const v = m ? parseQuantity(m[2], kind) : null;
  if (!m || v === null) {
    const s = q.toLowerCase();
    const f = c.fmt ?? ((r: T) => String(c.get(r)));
    return (r) => f(r).toLowerCase().includes(s);
  }
  const op = m[1] || '>=';
  return (r) => {
    const x = Number(c.get(r));
    switch (op) {
      case '>': return x > v;
      case '<': return x < v;
      case '<=': return x <= v;
      case '=': return Math.abs(x - v) < 1e-9 * Math.max(1, Math.abs(v)) || (kind !== 'num' && Math.abs(x - v) < 0.5);
    }
    return x >= v;
  };
}

// Fonts, and what a cell adds to its text: header cells their padding
// and the sort mark; body cells their padding, badges theirs.
const HEAD_FONT = '600 12px ';
const HEAD_EXTRA = 8 + 11;
const CELL_EXTRA = 12 + 2;
const BADGE_EXTRA = 12;
const SAMPLE = 400; // rows measured for a column's content

let measurer: CanvasRenderingContext2D | null = null;

// textWidth measures text in a font ("600 12px"; the page's family).
function textWidth(text: string, font: string, mono = false): number {
  if (!measurer) measurer = document.createElement('canvas').getContext('2d');
  if (!measurer) return text.length * 7;
  const fam = mono ? getComputedStyle(document.documentElement).getPropertyValue('--mono') || 'monospace' : getComputedStyle(document.body).fontFamily;
  measurer.font = font + ' ' + fam;
  return measurer.measureText(text).width;
}

// headMin is the width a column's header needs: its longest word (headers
// wrap between words), or what the column says its content needs.
function headMin<T>(c: Column<T>): number {
  let word = 0;
  for (const w of c.title.split(/\s+/)) word = Math.max(word, textWidth(w, HEAD_FONT));
  return Math.ceil(Math.max(word + HEAD_EXTRA, c.min ?? 0, 36));
}

export class VTable<T> {
  el: HTMLElement;
  private scroller: HTMLElement;
  private body: HTMLElement;
  private counter: HTMLElement;
  private rows: T[] = [];
  private view: T[] = [];
  private pool: HTMLElement[] = [];
  private rh: number;
  private sort: { id: string; desc: boolean } | null;
  private filters = new Map<string, string>();
  private heads = new Map<string, HTMLElement>();
  private raf = 0;
  private template = '';
  private inner: HTMLElement;
  private grids: HTMLElement[] = []; // the header and filter rows
  private floors: number[]; // each column's header's need
  private wants: number[]; // and its content's, up to its width
  private fitted = '';

  constructor(private cols: Column<T>[], private opt: Options<T>) {
    this.rh = opt.rowHeight ?? 26;
    this.sort = opt.sort ?? null;
    this.floors = cols.map((c) => headMin(c));
    this.wants = this.floors.slice();
    const head = h('div.vt-head', { role: 'row' });
    const filt = h('div.vt-filters', { role: 'row' });
    this.grids = [head, filt];
    for (const c of cols) {
      const th = h('div.vt-th', { role: 'columnheader', tabindex: 0, title: (c.tip ? c.tip + ' · ' : '') + 'click to sort', 'data-col': c.id, class: c.kind === 'text' ? '' : 'num' }, c.title);
      th.addEventListener('click', () => this.sortBy(c.id));
      th.addEventListener('keydown', (e) => {
        if (e.key === 'Enter' || e.key === ' ') {
          e.preventDefault();
          this.sortBy(c.id);
        }
      });
      this.heads.set(c.id, th);
      head.appendChild(th);
      if (c.filter === false) {
        filt.appendChild(h('div.vt-f'));
        continue;
      }
      const ph = c.kind === 'text' ? 'filter' : c.kind === 'dur' ? '>5m' : c.kind === 'bytes' ? '>1GiB' : c.kind === 'time' ? '' : '>2';
      const inp = h('input.vt-in', { type: 'search', placeholder: ph, 'aria-label': 'Filter ' + c.title, 'data-filter': c.id, title: c.kind === 'text' ? 'Substring; !text excludes' : 'Number with unit: >5m, <1GiB, 1m..5m, =3' });
      inp.addEventListener('input', () => {
        this.filters.set(c.id, inp.value);
        this.apply();
      });
      filt.appendChild(h('div.vt-f', null, inp));
    }
    this.body = h('div.vt-body', { role: 'rowgroup' });
    const inner = h('div.vt-inner', null, h('div.vt-sticky', null, head, opt.noFilters ? null : filt), this.body);
    this.inner = inner;
    this.scroller = h('div.vt-scroll', { role: 'table', 'aria-label': opt.label }, inner);
    this.fit();
    // The columns follow the window's width.
    if (typeof ResizeObserver !== 'undefined') new ResizeObserver(() => this.fit()).observe(this.scroller);
    if (opt.maxHeight) this.scroller.style.maxHeight = opt.maxHeight + 'px';
    this.scroller.addEventListener('scroll', () => this.schedule(), { passive: true });
    this.counter = h('span.vt-count');
    const reset = h('button.small', { type: 'button', title: 'Clear the filters' }, 'clear filters');
    reset.addEventListener('click', () => {
      for (const inp of filt.querySelectorAll('input')) (inp as HTMLInputElement).value = '';
      this.filters.clear();
      this.apply();
    });
    this.el = h('div.vt', null, h('div.vt-bar', null, this.counter, opt.noFilters ? null : reset), this.scroller);
    this.markSort();
  }

  setRows(rows: T[]): void {
    this.rows = rows;
    this.measure();
    this.apply();
  }

  // measure finds what each column's content needs (sampled rows).
  private measure(): void {
    const step = Math.max(1, Math.floor(this.rows.length / SAMPLE));
    this.wants = this.cols.map((c, i) => {
      let w = 0;
      for (let k = 0; k < this.rows.length; k += step) {
        const r = this.rows[k];
        const text = c.fmt ? c.fmt(r) : String(c.get(r));
        const mono = c.cls?.(r).includes('mono') ?? false;
        w = Math.max(w, textWidth(text, mono ? '11.5px' : '13px', mono) + (c.cell ? BADGE_EXTRA : 0));
      }
      // A flexible column (a name) shows what its width allows; the
      // others their content, up to twice their width.
      return Math.max(this.floors[i], Math.ceil(Math.min(w + CELL_EXTRA, c.flex ? c.width : 2 * c.width)));
    });
    this.fit();
  }

  // fit sets the columns' widths: each at least its header's need, then
  // as much of its content's as the width of the table allows (where not
  // all fits, the flexible columns, names, give up theirs first, then the
  // others in proportion), then a share of what is left by its width. The
  // table fits its card: no header cut, no column out of sight, down to a
  // 1366 px window.
  private fit(): void {
    const avail = this.scroller.clientWidth;
    const room = (flex: boolean): number => this.wants.reduce((s, w, i) => s + (!!this.cols[i].flex === flex ? w - this.floors[i] : 0), 0);
    let over = avail ? this.wants.reduce((s, w) => s + w, 0) - avail : 0;
    // The share of its room (want less floor) each kind of column keeps.
    const keep = { flex: 1, fixed: 1 };
    for (const kind of ['flex', 'fixed'] as const) {
      const r = room(kind === 'flex');
      if (over <= 0 || r <= 0) continue;
      const give = Math.min(over, r);
      keep[kind] = 1 - give / r;
      over -= give;
    }
    const mins = this.wants.map((w, i) => Math.floor(this.floors[i] + (w - this.floors[i]) * keep[this.cols[i].flex ? 'flex' : 'fixed']));
    const template = this.cols.map((c, i) => `minmax(${mins[i]}px, ${c.width * (c.flex ? 2 : 1)}fr)`).join(' ');
    if (template === this.fitted) return;
    this.fitted = this.template = template;
    this.inner.style.minWidth = mins.reduce((s, w) => s + w, 0) + 'px';
    for (const g of this.grids) g.style.gridTemplateColumns = template;
    for (const row of this.pool) row.style.gridTemplateColumns = template;
  }

  // setFilter sets a column's filter from outside (e.g. a click on a chart).
  setFilter(id: string, q: string): void {
    const inp = this.el.querySelector(`input[data-filter="${id}"]`) as HTMLInputElement | null;
    if (inp) inp.value = q;
    this.filters.set(id, q);
    this.apply();
  }

  shown(): T[] {
    return this.view;
  }

  private sortBy(id: string): void {
    if (this.sort && this.sort.id === id) this.sort = { id, desc: !this.sort.desc };
    else this.sort = { id, desc: this.cols.find((c) => c.id === id)?.kind !== 'text' };
    this.markSort();
    this.apply();
  }

  private markSort(): void {
    for (const [id, th] of this.heads) {
      th.classList.toggle('asc', !!this.sort && this.sort.id === id && !this.sort.desc);
      th.classList.toggle('desc', !!this.sort && this.sort.id === id && this.sort.desc);
      th.setAttribute('aria-sort', this.sort && this.sort.id === id ? (this.sort.desc ? 'descending' : 'ascending') : 'none');
    }
  }

  private apply(): void {
    const ms: ((r: T) => boolean)[] = [];
    for (const c of this.cols) {
      const m = matcher(c, this.filters.get(c.id) ?? '');
      if (m) ms.push(m);
    }
    let v = ms.length ? this.rows.filter((r) => ms.every((m) => m(r))) : this.rows.slice();
    if (this.sort) {
      const c = this.cols.find((x) => x.id === this.sort!.id);
      if (c) {
        const dir = this.sort.desc ? -1 : 1;
        if (c.kind === 'text') {
          const keys = new Map<T, string>();
          for (const r of v) keys.set(r, String(c.get(r)));
          v.sort((a, b) => dir * (keys.get(a)! < keys.get(b)! ? -1 : keys.get(a)! > keys.get(b)! ? 1 : 0));
        } else {
          v = v.map((r) => [Number(c.get(r)) || 0, r] as [number, T]).sort((a, b) => dir * (a[0] - b[0])).map((x) => x[1]);
        }
      }
    }
    this.view = v;
    this.body.style.height = v.length * this.rh + 'px';
    this.counter.textContent = v.length === this.rows.length ? `${this.rows.length.toLocaleString('en-US')} ${this.opt.label}` : `${v.length.toLocaleString('en-US')} of ${this.rows.length.toLocaleString('en-US')} ${this.opt.label}`;
    this.render();
    this.opt.onRender?.(v.length, this.rows.length);
    this.opt.onChange?.();
  }

  private schedule(): void {
    if (this.raf) return;
    this.raf = requestAnimationFrame(() => {
      this.raf = 0;
      this.render();
    });
  }

  private render(): void {
    const top = this.scroller.scrollTop;
    const height = this.scroller.clientHeight || this.opt.maxHeight || 600;
    const first = Math.max(0, Math.floor(top / this.rh) - 5);
    const count = Math.min(this.view.length - first, Math.ceil(height / this.rh) + 12);
    while (this.pool.length < count) {
      const row = h('div.vt-row', { role: 'row' });
      row.style.gridTemplateColumns = this.template;
      for (const c of this.cols) row.appendChild(h('div.vt-td', { role: 'cell', class: c.kind === 'text' ? '' : 'num' }));
      this.pool.push(row);
      this.body.appendChild(row);
    }
    for (let i = 0; i < this.pool.length; i++) {
      const row = this.pool[i];
      if (i >= count) {
        row.hidden = true;
        continue;
      }
      const r = this.view[first + i];
      row.hidden = false;
      row.style.transform = `translateY(${(first + i) * this.rh}px)`;
      row.className = 'vt-row' + ((first + i) % 2 ? ' odd' : '') + (this.opt.rowClass ? ' ' + this.opt.rowClass(r) : '');
      const cells = row.children;
      for (let j = 0; j < this.cols.length; j++) {
        const c = this.cols[j];
        const td = cells[j] as HTMLElement;
        const text = c.fmt ? c.fmt(r) : String(c.get(r));
        const href = c.href ? c.href(r) : null;
        td.className = 'vt-td' + (c.kind === 'text' ? '' : ' num') + (c.cls ? ' ' + c.cls(r) : '');
        // (Before the cell's own rendering, which may say more on hover.)
        td.title = text;
        if (c.cell) {
          clear(td);
          c.cell(r, td);
        } else if (href) {
          const a = td.firstChild as HTMLAnchorElement | null;
          if (a && a.nodeName === 'A' && td.childNodes.length === 1) {
            a.href = href;
            a.textContent = text;
          } else {
            clear(td);
            td.appendChild(h('a', { href }, text));
          }
        } else if (td.childNodes.length !== 1 || td.firstChild!.nodeType !== Node.TEXT_NODE) {
          clear(td);
          td.appendChild(document.createTextNode(text));
        } else if (td.firstChild!.nodeValue !== text) {
          td.firstChild!.nodeValue = text;
        }
      }
    }
  }
}
