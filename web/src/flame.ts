// Flame graphs of the attempts' stack profiles, drawn by d3-flame-graph
// (SVG; frame names go in as text, never as markup). Loaded with the first
// profile shown: the rest of the UI does without it.
import flamegraph, { colorMapper, type FrameNode } from 'd3-flame-graph';
import { select } from 'd3-selection';
// (The package's exports name no stylesheet: it is taken by its path.)
import '../node_modules/d3-flame-graph/dist/d3-flamegraph.css';
import { h, clear } from './dom';
import * as fmt from './fmt';
import type { FlameNode } from './api';

export interface Options {
  diff?: boolean; // color by delta: red where this profile spent more, blue less
  wait?: boolean; // the waiting view: off-CPU colours
  width?: number;
}

function dur(ns: number): string {
  return fmt.dur(ns / 1e6);
}

// draw draws a tree as the server sends it (internal/flame: values in
// nanoseconds; delta, in a differential tree, this profile's less the
// baseline's) into el, emptied first; a line under it names the frame
// under the pointer. It returns the chart, for its search.
export function draw(el: HTMLElement, tree: FlameNode, o: Options = {}): { search(s: string): void } {
  clear(el);
  const details = h('div.flame-details.muted');
  const box = h('div.flame-box');
  el.append(box, details);
  const total = tree.value || 1;
  const label = (d: FrameNode): string => {
    let s = `${d.data.name}: ${dur(d.value)} (${fmt.pct((100 * d.value) / total)})`;
    if (o.diff) {
      const delta = d.delta ?? d.data.delta ?? 0;
      s += `, ${delta >= 0 ? '+' : '−'}${dur(Math.abs(delta))} against the sibling`;
    }
    return s;
  };
  const chart = flamegraph()
    .width(Math.max(320, o.width ?? (el.clientWidth || 900)))
    .cellHeight(16)
    .minFrameSize(1)
    .transitionDuration(0)
    .sort(true)
    .setLabelHandler(label)
    .setDetailsElement(details);
  if (o.diff) chart.computeDelta(true).setColorMapper((d, orig) => colorMapper.differentialColorMapper(d, orig));
  else if (o.wait) chart.setColorMapper((d, orig) => colorMapper.offCpuColorMapper(d, orig));
  select(box).datum(tree).call(chart);
  return { search: (s: string) => chart.search(s) };
}
