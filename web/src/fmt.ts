// Units: bytes in binary units (KiB, MiB, GiB), CPU time and durations in
// human units, CPU rates in percent of one core or in cores.

export function bytes(b: number | null | undefined): string {
  if (b === null || b === undefined || !isFinite(b)) return '–';
  const a = Math.abs(b);
  if (a >= 1024 ** 4) return (b / 1024 ** 4).toFixed(2) + ' TiB';
  if (a >= 1024 ** 3) return (b / 1024 ** 3).toFixed(a >= 100 * 1024 ** 3 ? 0 : a >= 10 * 1024 ** 3 ? 1 : 2) + ' GiB';
  if (a >= 1024 ** 2) return (b / 1024 ** 2).toFixed(a >= 100 * 1024 ** 2 ? 0 : 1) + ' MiB';
  if (a >= 1024) return (b / 1024).toFixed(a >= 100 * 1024 ? 0 : 1) + ' KiB';
  return Math.round(b) + ' B';
}

export function rate(b: number | null | undefined): string {
  if (b === null || b === undefined || !isFinite(b)) return '–';
  return bytes(b) + '/s';
}

// dur formats milliseconds: 850 ms, 12.3 s, 4m 05s, 2h 03m, 3d 04h.
export function dur(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !isFinite(ms)) return '–';
  if (ms < 0) return '-' + dur(-ms);
  if (ms < 1000) return Math.round(ms) + ' ms';
  const s = ms / 1000;
  if (s < 10) return s.toFixed(2) + ' s';
  if (s < 60) return s.toFixed(1) + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm ' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
  const hh = Math.floor(m / 60);
  if (hh < 24) return hh + 'h ' + String(m % 60).padStart(2, '0') + 'm';
  return Math.floor(hh / 24) + 'd ' + String(hh % 24).padStart(2, '0') + 'h';
}

// cpuHours is CPU time in core-hours, or as a duration below an hour.
export function cpuHours(ms: number): string {
  const h = ms / 3.6e6;
  if (h < 1) return dur(ms);
  return (h >= 100 ? h.toFixed(0) : h >= 10 ? h.toFixed(1) : h.toFixed(2)) + ' h';
}

export function gbh(v: number): string {
  if (!isFinite(v)) return '–';
  if (v === 0) return '0 GB·h';
  return (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v >= 0.1 ? v.toFixed(2) : v.toPrecision(2)) + ' GB·h';
}

export function pct(v: number | null | undefined, digits = 0): string {
  if (v === null || v === undefined || !isFinite(v)) return '–';
  return v.toFixed(digits) + ' %';
}

export function cores(pctOfCore: number | null | undefined): string {
  if (pctOfCore === null || pctOfCore === undefined || !isFinite(pctOfCore)) return '–';
  const c = pctOfCore / 100;
  return (c >= 10 ? c.toFixed(0) : c >= 1 ? c.toFixed(1) : c.toFixed(2)) + ' cores';
}

export function num(v: number | null | undefined, digits = 0): string {
  if (v === null || v === undefined || !isFinite(v)) return '–';
  return v.toLocaleString('en-US', { maximumFractionDigits: digits });
}

function pad(n: number): string {
  return String(n).padStart(2, '0');
}

// time formats unix ms in local time: 2026-12-02 13:05:54.
export function time(ms: number | null | undefined): string {
  if (!ms) return '–';
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// shortTime leaves out the date when it is today.
export function shortTime(ms: number | null | undefined): string {
  if (!ms) return '–';
  const d = new Date(ms);
  const now = new Date();
  const t = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (d.toDateString() === now.toDateString()) return t;
  return `${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${t}`;
}

export function utc(ms: number | null | undefined): string {
  return ms ? new Date(ms).toISOString() : '';
}

export function ago(ms: number): string {
  return dur(Date.now() - ms) + ' ago';
}

// value formats a number of the API's unit names (the series catalog's and
// the findings' units).
export function unit(v: number, u: string): string {
  switch (u) {
    case 'bytes': return bytes(v);
    case 'bytes/s': return rate(v);
    case 'percent': return pct(v, Math.abs(v) < 10 ? 1 : 0);
    case 'ms': return dur(v);
    case 's': case 'seconds': return dur(v * 1000);
    case 'count': return num(v);
    case '1/s': return num(v, 1) + '/s';
    case 'ratio': case 'x': return num(v, 1) + '×';
    case 'mb': case 'MB': return bytes(v * 1024 * 1024);
  }
  return num(v, 2) + (u ? ' ' + u : '');
}

// parseQuantity reads "5m", "90s", "1.5h", "2GiB", "512MiB", "300" (in the
// column's base unit) for the table filters.
export function parseQuantity(s: string, kind: 'dur' | 'bytes' | 'num'): number | null {
  const m = /^\s*(-?[0-9]*\.?[0-9]+)\s*([a-zA-Z%]*)\s*$/.exec(s);
  if (!m) return null;
  const v = parseFloat(m[1]);
  const u = m[2].toLowerCase();
  if (kind === 'dur') {
    const f: Record<string, number> = { '': 1000, ms: 1, s: 1000, m: 60000, min: 60000, h: 3.6e6, d: 8.64e7 };
    return u in f ? v * f[u] : null;
  }
  if (kind === 'bytes') {
    const f: Record<string, number> = { '': 1024 * 1024, b: 1, k: 1024, kb: 1024, kib: 1024, m: 1024 ** 2, mb: 1024 ** 2, mib: 1024 ** 2, g: 1024 ** 3, gb: 1024 ** 3, gib: 1024 ** 3, t: 1024 ** 4, tib: 1024 ** 4 };
    return u in f ? v * f[u] : null;
  }
  return u === '' || u === '%' ? v : null;
}
