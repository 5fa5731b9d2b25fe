// Package flame turns a stack profile (wire.Profile) into what people and
// tools read: trees for flame graphs, on a CPU and waiting apart, under
// their thread groups (the task's main thread, GC, the JIT, the shuffle,
// Netty, Hadoop IPC, HDFS, the JVM's own); a differential tree of one
// profile against another over the same window (a straggler against a
// healthy sibling); collapsed-stack text (flamegraph.pl, speedscope);
// pprof (go tool pprof, Pyroscope); and the hottest frames.
package flame

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/taskscope/taskscope/internal/wire"
)

// View is which of a profile's times a tree shows.
type View string

// The views.
const (
	CPU  View = "cpu"  // time on a CPU
	Wait View = "wait" // time not on a CPU: blocked, waiting, parked, sleeping, in IO or native code
)

// ParseView reads "cpu" or "wait" ("" is cpu).
func ParseView(s string) (View, error) {
	switch View(s) {
	case "", CPU:
		return CPU, nil
	case Wait:
		return Wait, nil
	}
	return "", fmt.Errorf("view must be cpu or wait, not %q", s)
}

// Thread groups.
const (
	GroupTask    = "task"    // the thread that runs the task: main, Spark's task launch workers, Tez's TezChild
	GroupShuffle = "shuffle" // a reduce's fetchers and their event fetcher
	GroupSpill   = "spill"   // the map side's spill thread
	GroupGC      = "gc"
	GroupJIT     = "jit"
	GroupNetty   = "netty"
	GroupIPC     = "ipc"  // Hadoop RPC to the application master
	GroupHDFS    = "hdfs" // the HDFS client's streamer and responder threads
	GroupJVM     = "jvm"  // the JVM's housekeeping: VM thread, reference handler, finalizer, signals, attach
	GroupOther   = "other"
)

// groupRules name a thread's group by its name's start (thread names
// with their digits as N).
var groupRules = []struct{ prefix, group string }{
	{"main", GroupTask}, {"Executor task launch worker", GroupTask}, {"TezChild", GroupTask}, {"DestroyJavaVM", GroupJVM},
	{"fetcher", GroupShuffle}, {"Fetcher", GroupShuffle}, {"EventFetcher", GroupShuffle}, {"ShuffleAndMergeRunner", GroupShuffle},
	{"SpillThread", GroupSpill},
	{"GC Thread", GroupGC}, {"GC task thread", GroupGC}, {"G1 ", GroupGC}, {"Gang worker", GroupGC}, {"Concurrent Mark", GroupGC},
	{"CMS ", GroupGC}, {"ZGC", GroupGC}, {"Shenandoah", GroupGC}, {"Parallel GC", GroupGC},
	{"C1 CompilerThread", GroupJIT}, {"C2 CompilerThread", GroupJIT}, {"CN CompilerThread", GroupJIT}, {"Sweeper thread", GroupJIT},
	{"netty", GroupNetty}, {"nioEventLoopGroup", GroupNetty}, {"New I/O", GroupNetty}, {"shuffle-server", GroupNetty},
	{"shuffle-client", GroupNetty}, {"rpc-", GroupNetty},
	{"IPC Client", GroupIPC}, {"IPC Parameter Sending Thread", GroupIPC}, {"communication thread", GroupIPC}, {"pinger", GroupIPC},
	{"DataStreamer", GroupHDFS}, {"ResponseProcessor", GroupHDFS}, {"LeaseRenewer", GroupHDFS}, {"org.apache.hadoop.hdfs", GroupHDFS},
	{"VM Thread", GroupJVM}, {"VM Periodic Task Thread", GroupJVM}, {"Reference Handler", GroupJVM}, {"Finalizer", GroupJVM},
	{"Signal Dispatcher", GroupJVM}, {"Service Thread", GroupJVM}, {"Attach Listener", GroupJVM}, {"Common-Cleaner", GroupJVM},
	{"Notification Thread", GroupJVM}, {"Monitor Deflation Thread", GroupJVM}, {"process reaper", GroupJVM}, {"Thread for syncLogs", GroupJVM},
}

// Group is the group of a thread by its name.
func Group(thread string) string {
	for _, r := range groupRules {
		if strings.HasPrefix(thread, r.prefix) {
			return r.group
		}
	}
	return GroupOther
}

// waitFrames name what a thread waited in, at the top of its stack in
// the waiting view.
var waitFrames = map[string]string{
	wire.ThreadRunnable: "[IO or native code]",
	wire.ThreadDisk:     "[disk IO]",
	wire.ThreadBlocked:  "[blocked on a monitor]",
	wire.ThreadWaiting:  "[Object.wait]",
	wire.ThreadParked:   "[parked]",
	wire.ThreadSleeping: "[sleeping]",
	wire.ThreadOther:    "[waiting]",
}

// QueuedFrame is, at the top of a stack in the waiting view, the time its
// threads were runnable but waited for a CPU (busy neighbours, too few
// cores), apart from the time they waited for anything else.
const QueuedFrame = "[waiting for a CPU]"

// part is one of a stack's times in a view, and the frame it goes under
// ("" for none).
type part struct {
	ns    int64
	frame string
}

// parts are a stack's times in a view: on a CPU; or waiting, under what it
// waited in, and waiting for a CPU. In the waiting view the JVM's own
// housekeeping threads, which wait always, are left out.
func parts(p *wire.Profile, s *wire.ProfileStack, v View) [2]part {
	if v == CPU {
		return [2]part{{s.CPUNs, ""}}
	}
	if Group(p.Strings[s.Thread]) == GroupJVM {
		return [2]part{}
	}
	return [2]part{{s.WaitNs, waitFrames[s.State]}, {s.QueuedNs, QueuedFrame}}
}

// path is a stack's names from the root: its group, its thread, its
// frames, and what it waited in (frame, "" for none).
func path(p *wire.Profile, s *wire.ProfileStack, frame string, dst []string) []string {
	thread := p.Strings[s.Thread]
	dst = append(dst, "["+Group(thread)+"]", thread)
	for _, f := range s.Frames {
		dst = append(dst, p.Strings[f])
	}
	if frame != "" {
		dst = append(dst, frame)
	}
	return dst
}

// Node is a node of a flame graph's tree, as d3-flame-graph reads it:
// its name, its value (its time and its children's, in nanoseconds) and,
// in a differential tree, Delta (its time here less the baseline's).
type Node struct {
	Name     string  `json:"name"`
	Value    int64   `json:"value"`
	Delta    int64   `json:"delta,omitempty"`
	Children []*Node `json:"children,omitempty"`
	index    map[string]*Node
}

func (n *Node) child(name string) *Node {
	if c := n.index[name]; c != nil {
		return c
	}
	c := &Node{Name: name}
	if n.index == nil {
		n.index = map[string]*Node{}
	}
	n.index[name] = c
	n.Children = append(n.Children, c)
	return c
}

// add adds v (and d to Delta) along the path.
func (n *Node) add(names []string, v, d int64) {
	n.Value += v
	n.Delta += d
	for _, name := range names {
		n = n.child(name)
		n.Value += v
		n.Delta += d
	}
}

// sortTree orders children by name (flame graphs are alphabetical) and
// drops the nodes of no time in either profile.
func (n *Node) sortTree() {
	kept := n.Children[:0]
	for _, c := range n.Children {
		if c.Value != 0 || c.Delta != 0 {
			c.sortTree()
			kept = append(kept, c)
		}
	}
	n.Children = kept
	sort.Slice(n.Children, func(i, j int) bool { return n.Children[i].Name < n.Children[j].Name })
}

// addProfile adds the stacks of a view of p, their times scaled: to the
// values, times value, and to the deltas, times delta.
func (n *Node) addProfile(p *wire.Profile, v View, scale float64, value, delta int64) {
	var names []string
	for i := range p.Stacks {
		s := &p.Stacks[i]
		for _, x := range parts(p, s, v) {
			if ns := int64(float64(x.ns) * scale); ns > 0 {
				names = path(p, s, x.frame, names[:0])
				n.add(names, value*ns, delta*ns)
			}
		}
	}
}

// Tree is the flame graph of a view of p.
func Tree(p *wire.Profile, v View) *Node {
	root := &Node{Name: "all"}
	root.addProfile(p, v, 1, 1, 0)
	root.sortTree()
	return root
}

// Diff is the differential flame graph of p against base, a profile of
// another JVM over the same window: each node's Value is p's, and Delta
// is p's less base's (base's times scaled to p's window when their
// windows differ), so what p does more stands out; what only base does
// has Value 0.
func Diff(p, base *wire.Profile, v View) *Node {
	root := &Node{Name: "all"}
	root.addProfile(p, v, 1, 1, 1)
	root.addProfile(base, v, windowScale(p, base), 0, -1)
	root.sortTree()
	return root
}

// windowScale makes base's times p's window's.
func windowScale(p, base *wire.Profile) float64 {
	if pw, bw := p.EndMs-p.StartMs, base.EndMs-base.StartMs; pw > 0 && bw > 0 {
		return float64(pw) / float64(bw)
	}
	return 1
}

// Collapsed writes a view of p as collapsed stacks, one line a stack:
// its names from the root joined by ";" and its time in microseconds
// (what flamegraph.pl, speedscope and Pyroscope read). Names have their
// ";" and line ends replaced.
func Collapsed(w io.Writer, p *wire.Profile, v View) error {
	sums := map[string]int64{}
	var keys []string
	var names []string
	var b strings.Builder
	for i := range p.Stacks {
		s := &p.Stacks[i]
		for _, pt := range parts(p, s, v) {
			x := pt.ns / 1000
			if x <= 0 {
				continue
			}
			b.Reset()
			for j, n := range path(p, s, pt.frame, names[:0]) {
				if j > 0 {
					b.WriteByte(';')
				}
				b.WriteString(collapsedName.Replace(n))
			}
			k := b.String()
			if _, ok := sums[k]; !ok {
				keys = append(keys, k)
			}
			sums[k] += x
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, err := fmt.Fprintf(w, "%s %d\n", k, sums[k]); err != nil {
			return err
		}
	}
	return nil
}

var collapsedName = strings.NewReplacer(";", ":", "\n", " ", "\r", " ")

// Frame is a frame and the time spent in it.
type Frame struct {
	Name   string `json:"name"`
	Thread string `json:"thread_group"`
	SelfNs int64  `json:"self_ns"`
	// Share is of the view's whole time.
	Share float64 `json:"share"`
}

// libraryPrefixes are the JDK's own packages: the hottest frames are
// named by the innermost frame of the job's code (or of Hadoop's), where
// the time was asked for, rather than by the JDK method that spent it.
var libraryPrefixes = []string{"java.", "javax.", "jdk.", "sun.", "com.sun."}

// AppFrame is the innermost frame of a stack (outermost first) that is
// not the JDK's, else its innermost.
func AppFrame(frames []string) string {
	for i := len(frames) - 1; i >= 0; i-- {
		lib := false
		for _, pre := range libraryPrefixes {
			lib = lib || strings.HasPrefix(frames[i], pre)
		}
		if !lib && !strings.HasPrefix(frames[i], "[") {
			return frames[i]
		}
	}
	if len(frames) > 0 {
		return frames[len(frames)-1]
	}
	return ""
}

// byFrame adds up a view's time by the job's frame (AppFrame) and thread
// group, scaled by scale; and its whole time.
func byFrame(p *wire.Profile, v View, scale float64, into map[[2]string]int64, sign int64) int64 {
	var total int64
	var frames []string
	for i := range p.Stacks {
		s := &p.Stacks[i]
		x := int64(float64(parts(p, s, v)[0].ns) * scale)
		if x <= 0 {
			continue
		}
		total += x
		frames = frames[:0]
		for _, f := range s.Frames {
			frames = append(frames, p.Strings[f])
		}
		thread := p.Strings[s.Thread]
		name := AppFrame(frames)
		if name == "" {
			name = "[" + thread + "]"
		}
		into[[2]string{name, Group(thread)}] += sign * x
	}
	return total
}

// top sorts frames by time, largest first, and keeps n.
func top(sums map[[2]string]int64, total int64, n int) []Frame {
	out := make([]Frame, 0, len(sums))
	for key, x := range sums {
		if x > 0 {
			out = append(out, Frame{Name: key[0], Thread: key[1], SelfNs: x, Share: float64(x) / float64(max(total, 1))})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].SelfNs != out[j].SelfNs {
			return out[i].SelfNs > out[j].SelfNs
		}
		return out[i].Name < out[j].Name
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// More are the n frames of the job's code that p spent more of a view's
// time in than base (scaled to p's window), most first: what a straggler
// does more than its sibling. Share is of p's whole time in the view.
func More(p, base *wire.Profile, v View, n int) []Frame {
	sums := map[[2]string]int64{}
	total := byFrame(p, v, 1, sums, 1)
	byFrame(base, v, windowScale(p, base), sums, -1)
	return top(sums, total, n)
}

// Hottest are the n frames of the job's code (AppFrame) that a view's
// time went to most, with their thread group, largest first: on a CPU, or
// waiting (not the time waiting for a CPU, which says how busy the node
// was rather than where the task waited). Stacks without frames (the
// JVM's own threads) count as their thread's name.
func Hottest(p *wire.Profile, v View, n int) []Frame {
	sums := map[[2]string]int64{}
	total := byFrame(p, v, 1, sums, 1)
	return top(sums, total, n)
}
