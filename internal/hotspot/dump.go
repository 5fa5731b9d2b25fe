package hotspot

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// JavaState is a Java thread's java.lang.Thread.State, as a thread dump
// prints it; StateNone for the JVM's own threads (GC, compiler, VM thread),
// which have none.
type JavaState uint8

// The states of a thread.
const (
	StateNone JavaState = iota
	StateRunnable
	StateBlocked      // BLOCKED (on object monitor): waiting to enter a synchronized block
	StateWaiting      // WAITING
	StateTimedWaiting // TIMED_WAITING
	StateNew
	StateTerminated
)

var stateNames = [...]string{"", "RUNNABLE", "BLOCKED", "WAITING", "TIMED_WAITING", "NEW", "TERMINATED"}

func (s JavaState) String() string { return stateNames[s] }

// Wait is what a thread that is not runnable waits in, from its state's
// detail: "(on object monitor)", "(parking)", "(sleeping)".
type Wait uint8

// What a thread waits in.
const (
	WaitNone     Wait = iota
	WaitMonitor       // a monitor: entering synchronized (BLOCKED) or Object.wait()
	WaitParking       // LockSupport.park: java.util.concurrent locks, queues, conditions
	WaitSleeping      // Thread.sleep
)

// Thread is one thread of a dump. Name and Frames point into the dump's
// bytes and into a buffer ParseThreadDump reuses: they are valid during the
// callback only.
type Thread struct {
	Name   []byte
	TID    int32 // the Linux thread id (nid): /proc/<pid>/task/<tid>
	Daemon bool
	Java   bool // a Java thread (it has a java.lang.Thread.State)
	State  JavaState
	Wait   Wait
	// Frames are the thread's methods, innermost first, each
	// "package.Class.method" (the source file and line left out, and the
	// address in a hidden class's name, which differs from JVM to JVM).
	Frames [][]byte
	// Dropped counts the frames beyond Limits.MaxFrames (the outermost).
	Dropped int
}

// Limits bound what a dump may hold.
type Limits struct {
	MaxThreads int // default 20,000
	MaxFrames  int // frames kept per thread, innermost first (default 256)
}

// ErrDump wraps the errors of ParseThreadDump.
var ErrDump = errors.New("not a thread dump")

// ParseThreadDump calls fn for each thread of a HotSpot thread dump (the
// output of threaddump, jstack, kill -3) of JDK 8 and later, in the order
// of the dump. It allocates nothing per thread, and may modify b (frames
// are shortened in place). An error of fn stops it and is returned.
func ParseThreadDump(b []byte, lim Limits, fn func(t *Thread) error) error {
	if lim.MaxThreads <= 0 {
		lim.MaxThreads = 20000
	}
	if lim.MaxFrames <= 0 {
		lim.MaxFrames = 256
	}
	var t Thread
	in := false
	threads := 0
	frames := make([][]byte, 0, 64)
	flush := func() error {
		if !in {
			return nil
		}
		in = false
		t.Frames = frames
		return fn(&t)
	}
	for len(b) > 0 {
		var line []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		switch {
		case len(line) > 0 && line[0] == '"':
			if err := flush(); err != nil {
				return err
			}
			if threads++; threads > lim.MaxThreads {
				return fmt.Errorf("%w: more than %d threads", ErrDump, lim.MaxThreads)
			}
			h, ok := parseHeader(line)
			if !ok {
				continue // a line of something else, starting with a quote
			}
			t, in = h, true
			frames = frames[:0]
		case !in:
		case bytes.HasPrefix(line, []byte("\tat ")):
			if len(frames) >= lim.MaxFrames {
				t.Dropped++
				continue
			}
			frames = append(frames, frameName(line[4:]))
		case bytes.HasPrefix(line, []byte("   java.lang.Thread.State: ")):
			t.Java = true
			t.State, t.Wait = parseState(line[len("   java.lang.Thread.State: "):])
		case len(line) == 0:
			// A blank line ends a thread's block; the lines after it
			// (the locked synchronizers of jstack -l, JNI refs) are not
			// frames.
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if threads == 0 {
		return fmt.Errorf("%w: no thread", ErrDump)
	}
	return nil
}

// parseHeader reads a thread's first line:
//
//	"main" #1 prio=5 os_prio=0 tid=0x00007f8... nid=0x1a2b runnable [0x...]          (JDK 8)
//	"main" #1 prio=5 os_prio=0 cpu=531.72ms elapsed=2.56s tid=0x... nid=0x78a runnable  [0x...] (JDK 11-17)
//	"main" #1 [1234] prio=5 os_prio=0 cpu=... elapsed=... tid=0x... nid=1234 runnable  [0x...]  (JDK 19+)
//	"VM Thread" os_prio=0 cpu=0.44ms elapsed=2.50s tid=0x... nid=0x7b5 runnable
//
// A thread's name may hold anything, quotes and " nid=" included: the
// fields are read from the end (none of them holds a quote), and the name
// is what lies before them.
func parseHeader(line []byte) (Thread, bool) {
	var t Thread
	nid := bytes.LastIndex(line, []byte(" nid="))
	if nid < 0 {
		return t, false
	}
	v := line[nid+len(" nid="):]
	if sp := bytes.IndexByte(v, ' '); sp >= 0 {
		v = v[:sp]
	}
	var n uint64
	var err error
	if h, ok := bytes.CutPrefix(v, []byte("0x")); ok {
		n, err = strconv.ParseUint(string(h), 16, 32)
	} else {
		n, err = strconv.ParseUint(string(v), 10, 32)
	}
	if err != nil || n == 0 || n > 1<<31-1 {
		return t, false
	}
	t.TID = int32(n)
	head := line[:nid]
	// No field after the name holds a quote: the name ends at the last.
	end := bytes.LastIndexByte(head, '"')
	if end < 1 {
		return t, false
	}
	t.Name = head[1:end]
	t.Daemon = bytes.Contains(head[end:], []byte(" daemon "))
	return t, true
}

// parseState reads "RUNNABLE", "BLOCKED (on object monitor)", "WAITING
// (parking)", "TIMED_WAITING (sleeping)", ...
func parseState(v []byte) (JavaState, Wait) {
	word, detail, _ := bytes.Cut(bytes.TrimSpace(v), []byte{' '})
	var s JavaState
	for i, n := range stateNames {
		if i > 0 && string(word) == n {
			s = JavaState(i)
		}
	}
	w := WaitNone
	switch {
	case bytes.Contains(detail, []byte("monitor")):
		w = WaitMonitor
	case bytes.Contains(detail, []byte("parking")):
		w = WaitParking
	case bytes.Contains(detail, []byte("sleeping")):
		w = WaitSleeping
	}
	return s, w
}

// frameName reduces "java.lang.Thread.sleep(java.base@17.0.15/Native
// Method)" to "java.lang.Thread.sleep", and a hidden class's
// "L$$Lambda$14/0x0000000800c03000.run" to "L$$Lambda$14.run". It returns
// a part of its argument, which it may modify.
func frameName(f []byte) []byte {
	if i := bytes.IndexByte(f, '('); i >= 0 {
		f = f[:i]
	}
	if i := bytes.Index(f, []byte("/0x")); i >= 0 {
		j := i + 3
		for j < len(f) && isHex(f[j]) {
			j++
		}
		f = append(f[:i], f[j:]...)
	}
	return f
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
