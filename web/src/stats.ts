// Small statistics for the distributions.

export function quantile(sorted: number[], q: number): number {
  if (!sorted.length) return NaN;
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos), hi = Math.ceil(pos);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

export interface Box {
  min: number; q1: number; median: number; q3: number; max: number;
  lo: number; hi: number; // whiskers: the furthest values within 1.5 IQR
  n: number;
}

export function box(values: number[]): Box {
  const s = values.slice().sort((a, b) => a - b);
  const q1 = quantile(s, 0.25), q3 = quantile(s, 0.75), iqr = q3 - q1;
  const loFence = q1 - 1.5 * iqr, hiFence = q3 + 1.5 * iqr;
  let lo = s[0], hi = s[s.length - 1];
  for (const v of s) if (v >= loFence) { lo = v; break; }
  for (let i = s.length - 1; i >= 0; i--) if (s[i] <= hiFence) { hi = s[i]; break; }
  // With few values the interpolated quartiles can lie beyond the whiskers.
  lo = Math.min(lo, q1);
  hi = Math.max(hi, q3);
  return { min: s[0], q1, median: quantile(s, 0.5), q3, max: s[s.length - 1], lo, hi, n: s.length };
}

export function median(values: number[]): number {
  return quantile(values.slice().sort((a, b) => a - b), 0.5);
}
