// The part of d3-flame-graph (Apache-2.0, github.com/spiermar/d3-flame-graph)
// that taskscope uses: it ships no types.
declare module 'd3-flame-graph' {
  export interface FrameNode {
    data: { name: string; value: number; delta?: number };
    value: number;
    delta?: number;
    x0: number;
    x1: number;
    parent: FrameNode | null;
  }
  export interface FlameGraph {
    (selection: unknown): void;
    width(w: number): FlameGraph;
    cellHeight(h: number): FlameGraph;
    minFrameSize(px: number): FlameGraph;
    transitionDuration(ms: number): FlameGraph;
    sort(on: boolean): FlameGraph;
    selfValue(on: boolean): FlameGraph;
    computeDelta(on: boolean): FlameGraph;
    setColorMapper(fn?: (d: FrameNode, original: string) => string): FlameGraph;
    setLabelHandler(fn: (d: FrameNode) => string): FlameGraph;
    setDetailsElement(el: HTMLElement | null): FlameGraph;
    setDetailsHandler(fn: (label: string | null) => void): FlameGraph;
    tooltip(t: unknown): FlameGraph;
    search(term: string): void;
    clear(): void;
    resetZoom(): void;
    destroy(): void;
  }
  const flamegraph: () => FlameGraph;
  export default flamegraph;
  export const colorMapper: {
    differentialColorMapper(d: FrameNode, original: string): string;
    offCpuColorMapper(d: FrameNode, original: string): string;
  };
}
