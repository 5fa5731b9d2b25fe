package sampler

import (
	"encoding/binary"

	"github.com/taskscope/taskscope/internal/wire"
)

// Limits bound a profile's size whatever the JVM does: distinct stacks,
// distinct strings (frames and thread names) and frames per stack.
type Limits struct {
	MaxStacks  int // default 4096
	MaxStrings int // default 16384
	MaxFrames  int // per stack, innermost kept (default 256)
}

func (l *Limits) defaults() {
	if l.MaxStacks <= 0 {
		l.MaxStacks = 4096
	}
	if l.MaxStrings <= 0 {
		l.MaxStrings = 16384
	}
	if l.MaxFrames <= 0 {
		l.MaxFrames = 256
	}
	// Room beyond them for OtherFrame, its string and its stacks.
	l.MaxStacks = min(l.MaxStacks, wire.MaxProfileStacks/2)
	l.MaxStrings = min(l.MaxStrings, wire.MaxProfileStrings-1)
	l.MaxFrames = min(l.MaxFrames, wire.MaxProfileFrames-1)
}

// DeeperFrame stands, at the root of a stack, for the outermost frames
// beyond Limits.MaxFrames.
const DeeperFrame = "[deeper frames left out]"

// Folder folds thread samples into stacks: each (thread name, state,
// frames) once, with the CPU and waiting time added up; every string
// once. Within its Limits: a sample that would need a stack or a string
// beyond them goes to its thread's and state's wire.OtherFrame stack, and
// is counted.
type Folder struct {
	lim     Limits
	strings []string
	index   map[string]uint32
	stacks  []wire.ProfileStack
	byKey   map[string]int
	dropped uint32
	key     []byte   // scratch
	ids     []uint32 // scratch
	name    []byte   // scratch
}

// NewFolder returns an empty Folder.
func NewFolder(lim Limits) *Folder {
	lim.defaults()
	return &Folder{lim: lim, index: map[string]uint32{}, byKey: map[string]int{}}
}

// intern returns the index of s, adding it; ok is false when the strings
// are full.
func (f *Folder) intern(s []byte) (uint32, bool) {
	if i, ok := f.index[string(s)]; ok {
		return i, true
	}
	if len(f.strings) >= f.lim.MaxStrings {
		return 0, false
	}
	if len(s) > wire.MaxProfileStringBytes {
		s = s[:wire.MaxProfileStringBytes]
	}
	str := string(s)
	i := uint32(len(f.strings))
	f.strings = append(f.strings, str)
	f.index[str] = i
	return i, true
}

// ThreadName is a thread's name with each run of digits as N, so that a
// pool's threads ("fetcher#3", "GC Thread#1") share their stacks. It
// appends to dst.
func ThreadName(dst, name []byte) []byte {
	digits := false
	for _, c := range name {
		if c >= '0' && c <= '9' {
			if !digits {
				dst = append(dst, 'N')
			}
			digits = true
			continue
		}
		digits = false
		dst = append(dst, c)
	}
	if len(dst) == 0 {
		dst = append(dst, '?')
	}
	return dst
}

// Add adds one thread's sample: its name (its digits made N here), state
// (a wire.Thread* state), frames innermost first (as a dump lists them),
// how many outer frames were left out of them, and its time on a CPU,
// waiting (not runnable), and runnable waiting for a CPU.
func (f *Folder) Add(thread []byte, state string, frames [][]byte, deeper int, cpuNs, waitNs, queuedNs int64) {
	t := times{cpuNs, waitNs, queuedNs}
	f.name = ThreadName(f.name[:0], thread)
	ids := f.ids[:0]
	full := false
	tid, ok := f.intern(f.name)
	if !ok {
		// No room for even the thread's name: the sample is counted only.
		f.dropped++
		return
	}
	if len(frames) > f.lim.MaxFrames {
		deeper += len(frames) - f.lim.MaxFrames
		frames = frames[:f.lim.MaxFrames]
	}
	if deeper > 0 {
		id, ok := f.intern([]byte(DeeperFrame))
		full = !ok
		ids = append(ids, id)
	}
	for i := len(frames) - 1; i >= 0 && !full; i-- {
		id, ok := f.intern(frames[i])
		full = !ok
		ids = append(ids, id)
	}
	f.ids = ids
	if full {
		f.addOther(tid, state, t)
		return
	}
	k := f.stackKey(tid, state, ids)
	if i, ok := f.byKey[string(k)]; ok {
		t.add(&f.stacks[i])
		return
	}
	if len(f.stacks) >= f.lim.MaxStacks {
		f.addOther(tid, state, t)
		return
	}
	f.byKey[string(k)] = len(f.stacks)
	f.stacks = append(f.stacks, wire.ProfileStack{Thread: tid, State: state, Frames: append([]uint32(nil), ids...)})
	t.add(&f.stacks[len(f.stacks)-1])
}

// times are a sample's.
type times struct{ cpu, wait, queued int64 }

func (t times) add(s *wire.ProfileStack) {
	s.CPUNs += t.cpu
	s.WaitNs += t.wait
	s.QueuedNs += t.queued
	s.Samples++
}

// addOther counts a sample beyond the bounds in its thread's and state's
// OtherFrame stack, made beyond MaxStacks if need be (one per thread name
// and state, within the wire's bound: beyond it the time is lost, and
// counted).
func (f *Folder) addOther(tid uint32, state string, t times) {
	f.dropped++
	other, ok := f.index[wire.OtherFrame]
	if !ok {
		// MaxStrings leaves room for it.
		other = uint32(len(f.strings))
		f.strings = append(f.strings, wire.OtherFrame)
		f.index[wire.OtherFrame] = other
	}
	k := f.stackKey(tid, state, []uint32{other})
	if i, ok := f.byKey[string(k)]; ok {
		t.add(&f.stacks[i])
		return
	}
	if len(f.stacks) >= wire.MaxProfileStacks {
		return
	}
	f.byKey[string(k)] = len(f.stacks)
	f.stacks = append(f.stacks, wire.ProfileStack{Thread: tid, State: state, Frames: []uint32{other}})
	t.add(&f.stacks[len(f.stacks)-1])
}

func (f *Folder) stackKey(tid uint32, state string, ids []uint32) []byte {
	k := binary.LittleEndian.AppendUint32(f.key[:0], tid)
	k = append(k, state...)
	k = append(k, 0)
	for _, id := range ids {
		k = binary.LittleEndian.AppendUint32(k, id)
	}
	f.key = k
	return k
}

// Stacks is how many stacks the folder holds.
func (f *Folder) Stacks() int { return len(f.stacks) }

// Fill sets p's strings, stacks and dropped samples to what was folded.
// The folder must not be used afterwards.
func (f *Folder) Fill(p *wire.Profile) {
	p.Strings, p.Stacks, p.DroppedSamples = f.strings, f.stacks, f.dropped
}
