package wire

import (
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Profile is where a JVM's threads spent a window of time: thread dumps
// taken at a bounded rate, each thread's stack weighted by the CPU the
// thread used since the dump before (from /proc/PID/task/TID) and by the
// rest of that time, when it waited. A batch carries the profiles that
// ended since the last batch (field 15); a server before them skips the
// field.
type Profile struct {
	ID         string // the request's id (the server makes it)
	AttemptID  string
	Process    uint64 // the JVM's process key
	PID        int32
	StartMs    int64
	EndMs      int64
	IntervalMs int64  // the rate asked: dumps were at least this far apart
	Dumps      uint32 // thread dumps taken
	PausedUs   int64  // how long the JVM's threads were stopped for the dumps, in all
	MaxPauseUs int64  // the longest of those pauses
	Status     string // ProfileComplete, ProfilePartial, ProfileFailed
	Error      string // why it failed, or ended before its window
	// Strings are the frames and thread names, each once; stacks refer
	// to them by index.
	Strings []string
	Stacks  []ProfileStack
	// DroppedSamples counts the thread samples of stacks beyond the
	// agent's bound of distinct stacks: their time is in the stack of the
	// thread's state with the frame OtherFrame.
	DroppedSamples uint32
}

// ProfileStack is one stack of one thread (threads of the same name, with
// their digits as N, share stacks), in one state, and what it was
// weighed over the intervals that ended with a dump showing its threads in
// it: the time they ran on a CPU, the time they were runnable but waited
// for a CPU (the run queue: busy neighbours), and the rest, when they
// waited (blocked, asleep, in IO).
type ProfileStack struct {
	Thread   uint32   // index into Strings: the thread's name
	State    string   // what the thread did: one of the Thread* states
	Frames   []uint32 // indexes into Strings, outermost first
	CPUNs    int64
	WaitNs   int64  // not runnable: blocked, waiting, asleep, in IO (0 for the JVM's own threads)
	Samples  uint32 // dumps that showed a thread in it
	QueuedNs int64  // runnable, waiting for a CPU
}

// Profile statuses.
const (
	ProfileComplete = "complete" // its whole window
	ProfilePartial  = "partial"  // cut short: the JVM exited, its pause budget was spent, the agent stopped
	ProfileFailed   = "failed"   // no dump could be taken (Error says why); no stacks
)

// Thread states of a ProfileStack.
const (
	ThreadRunnable = "runnable" // Java RUNNABLE: on a CPU, or in native code or IO (its time off a CPU is that wait)
	ThreadDisk     = "disk"     // RUNNABLE, and in uninterruptible sleep (D) when dumped: disk IO
	ThreadBlocked  = "blocked"  // BLOCKED: waiting to enter a monitor (synchronized)
	ThreadWaiting  = "waiting"  // WAITING or TIMED_WAITING in Object.wait
	ThreadParked   = "parked"   // parked: a java.util.concurrent lock, queue or condition
	ThreadSleeping = "sleeping" // Thread.sleep
	ThreadOther    = "other"    // another Java state (NEW, TERMINATED, waiting in something else)
	ThreadVM       = "vm"       // the JVM's own threads (GC, compilers, the VM thread): CPU only
)

// ValidThreadState reports whether s is one of the thread states.
func ValidThreadState(s string) bool {
	switch s {
	case ThreadRunnable, ThreadDisk, ThreadBlocked, ThreadWaiting, ThreadParked, ThreadSleeping, ThreadOther, ThreadVM:
		return true
	}
	return false
}

// OtherFrame stands for the stacks beyond the agent's bound.
const OtherFrame = "[other stacks]"

// Bounds of a profile (Validate checks them).
const (
	MaxProfileIDBytes     = 128
	MaxProfileStrings     = 1 << 16
	MaxProfileStringBytes = 4096
	MaxProfileStacks      = 1 << 16
	MaxProfileFrames      = 1024 // per stack
)

func (p *Profile) marshal(e *enc) {
	e.str(1, p.ID)
	e.str(2, p.AttemptID)
	e.fixed(3, p.Process)
	e.sint(4, int64(p.PID))
	e.sint(5, p.StartMs)
	e.sint(6, p.EndMs)
	e.sint(7, p.IntervalMs)
	e.uint(8, uint64(p.Dumps))
	e.sint(9, p.PausedUs)
	e.sint(10, p.MaxPauseUs)
	e.str(11, p.Status)
	e.str(12, p.Error)
	for _, s := range p.Strings {
		e.strAlways(13, s)
	}
	for i := range p.Stacks {
		at := e.open(14)
		p.Stacks[i].marshal(e)
		e.close(at)
	}
	e.uint(15, uint64(p.DroppedSamples))
}

func (s *ProfileStack) marshal(e *enc) {
	e.uint(1, uint64(s.Thread))
	e.str(2, s.State)
	if len(s.Frames) > 0 {
		at := e.open(3)
		for _, f := range s.Frames {
			e.b = protowire.AppendVarint(e.b, uint64(f))
		}
		e.close(at)
	}
	e.sint(4, s.CPUNs)
	e.sint(5, s.WaitNs)
	e.uint(6, uint64(s.Samples))
	e.sint(7, s.QueuedNs)
}

// MarshalProfile appends the encoding of p (a Profile message of
// docs/wire.proto) to dst: what a store keeps of a profile.
func MarshalProfile(dst []byte, p *Profile) []byte {
	e := enc{b: dst}
	p.marshal(&e)
	return e.b
}

// UnmarshalProfile decodes what MarshalProfile wrote, within lim.
func UnmarshalProfile(data []byte, lim Limits) (*Profile, error) {
	d := dec{lim: lim}
	p := &Profile{}
	if err := d.profile(data, p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return p, nil
}

func (d *dec) profile(data []byte, p *Profile) error {
	return d.fields(data, func(n protowire.Number, t protowire.Type, v []byte, u uint64) error {
		var err error
		switch n {
		case 1:
			p.ID, err = d.str(t, v)
		case 2:
			p.AttemptID, err = d.str(t, v)
		case 3:
			p.Process, err = fixed(t, u)
		case 4:
			p.PID, err = int32of(t, u)
		case 5:
			p.StartMs, err = svarint(t, u)
		case 6:
			p.EndMs, err = svarint(t, u)
		case 7:
			p.IntervalMs, err = svarint(t, u)
		case 8:
			p.Dumps, err = uint32of(t, u, "dumps")
		case 9:
			p.PausedUs, err = svarint(t, u)
		case 10:
			p.MaxPauseUs, err = svarint(t, u)
		case 11:
			p.Status, err = d.str(t, v)
		case 12:
			p.Error, err = d.str(t, v)
		case 13:
			var s string
			if s, err = d.str(t, v); err == nil {
				if len(p.Strings) >= MaxProfileStrings {
					return fmt.Errorf("more than %d strings", MaxProfileStrings)
				}
				if err = d.charge(sizeString); err == nil {
					p.Strings = append(p.Strings, s)
				}
			}
		case 14:
			if err = d.sub(t); err == nil {
				if len(p.Stacks) >= MaxProfileStacks {
					return fmt.Errorf("more than %d stacks", MaxProfileStacks)
				}
				if err = d.charge(sizeStack); err == nil {
					p.Stacks = append(p.Stacks, ProfileStack{})
					err = d.stack(v, &p.Stacks[len(p.Stacks)-1])
				}
			}
		case 15:
			p.DroppedSamples, err = uint32of(t, u, "dropped_samples")
		}
		return err
	})
}

func (d *dec) stack(data []byte, s *ProfileStack) error {
	return d.fields(data, func(n protowire.Number, t protowire.Type, v []byte, u uint64) error {
		var err error
		switch n {
		case 1:
			s.Thread, err = uint32of(t, u, "thread")
		case 2:
			s.State, err = d.str(t, v)
		case 3:
			s.Frames, err = d.uint32s(t, v, u, s.Frames)
		case 4:
			s.CPUNs, err = svarint(t, u)
		case 5:
			s.WaitNs, err = svarint(t, u)
		case 6:
			s.Samples, err = uint32of(t, u, "samples")
		case 7:
			s.QueuedNs, err = svarint(t, u)
		}
		return err
	})
}

// uint32s decodes a repeated uint32 field, packed or one element per
// field, appending to dst; every value counts as a point.
func (d *dec) uint32s(t protowire.Type, v []byte, u uint64, dst []uint32) ([]uint32, error) {
	if t == protowire.VarintType {
		v = protowire.AppendVarint(nil, u)
	} else if t != protowire.BytesType {
		return dst, fmt.Errorf("%w %d, want packed uint32", ErrWireType, t)
	}
	n := 0
	for _, c := range v {
		if c < 0x80 {
			n++
		}
	}
	if d.points+n > d.lim.MaxPoints {
		return dst, fmt.Errorf("more than %d points", d.lim.MaxPoints)
	}
	d.points += n
	if err := d.charge(4 * (len(dst) + n)); err != nil {
		return dst, err
	}
	if dst == nil {
		dst = make([]uint32, 0, n)
	}
	for len(v) > 0 {
		x, l := protowire.ConsumeVarint(v)
		if l < 0 {
			return dst, parseError(l)
		}
		if x > math.MaxUint32 {
			return dst, fmt.Errorf("value %d does not fit 32 bits", x)
		}
		v = v[l:]
		dst = append(dst, uint32(x))
	}
	return dst, nil
}

func uint32of(t protowire.Type, u uint64, name string) (uint32, error) {
	x, err := varint(t, u)
	if err == nil && x > math.MaxUint32 {
		err = fmt.Errorf("%s %d out of range", name, x)
	}
	return uint32(x), err
}

// ValidateProfile checks a profile as Validate checks a batch's (the error
// wraps ErrInvalid).
func ValidateProfile(p *Profile) error {
	if err := validProfile(p); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// ValidProfileID reports whether id is 1 to MaxProfileIDBytes of
// [A-Za-z0-9._:-]: it names the profile in URLs.
func ValidProfileID(id string) bool {
	if id == "" || len(id) > MaxProfileIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

func validProfile(p *Profile) error {
	if !ValidProfileID(p.ID) {
		return fmt.Errorf("id %.40q: a profile id is 1 to %d of [A-Za-z0-9._:-]", p.ID, MaxProfileIDBytes)
	}
	if p.AttemptID == "" || len(p.AttemptID) > 256 {
		return errors.New("attempt_id is required, at most 256 bytes")
	}
	if err := times("start_ms", p.StartMs, "end_ms", p.EndMs); err != nil {
		return err
	}
	if p.EndMs < p.StartMs {
		return fmt.Errorf("end_ms %d before start_ms %d", p.EndMs, p.StartMs)
	}
	if p.IntervalMs < 0 || p.PausedUs < 0 || p.MaxPauseUs < 0 {
		return errors.New("interval_ms, paused_us and max_pause_us must not be negative")
	}
	switch p.Status {
	case ProfileComplete, ProfilePartial:
	case ProfileFailed:
		if len(p.Stacks) > 0 {
			return errors.New("a failed profile has no stacks")
		}
	default:
		return fmt.Errorf("status %.40q: one of complete, partial, failed", p.Status)
	}
	if err := utf(p.AttemptID, p.Status, p.Error); err != nil {
		return err
	}
	if len(p.Strings) > MaxProfileStrings || len(p.Stacks) > MaxProfileStacks {
		return fmt.Errorf("%d strings and %d stacks: at most %d of each", len(p.Strings), len(p.Stacks), MaxProfileStrings)
	}
	for i, s := range p.Strings {
		if s == "" || len(s) > MaxProfileStringBytes {
			return fmt.Errorf("strings[%d]: 1 to %d bytes, is %d", i, MaxProfileStringBytes, len(s))
		}
		if err := utf(s); err != nil {
			return fmt.Errorf("strings[%d]: %v", i, err)
		}
	}
	n := uint32(len(p.Strings))
	for i := range p.Stacks {
		s := &p.Stacks[i]
		if s.Thread >= n {
			return fmt.Errorf("stacks[%d]: thread %d is not one of the %d strings", i, s.Thread, n)
		}
		if !ValidThreadState(s.State) {
			return fmt.Errorf("stacks[%d]: state %.40q is not a thread state", i, s.State)
		}
		if len(s.Frames) > MaxProfileFrames {
			return fmt.Errorf("stacks[%d]: %d frames, at most %d", i, len(s.Frames), MaxProfileFrames)
		}
		for j, f := range s.Frames {
			if f >= n {
				return fmt.Errorf("stacks[%d]: frames[%d] %d is not one of the %d strings", i, j, f, n)
			}
		}
		if s.CPUNs < 0 || s.WaitNs < 0 || s.QueuedNs < 0 {
			return fmt.Errorf("stacks[%d]: cpu_ns %d, wait_ns %d and queued_ns %d must not be negative", i, s.CPUNs, s.WaitNs, s.QueuedNs)
		}
	}
	return nil
}
