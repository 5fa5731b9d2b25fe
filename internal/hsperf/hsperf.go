// Package hsperf reads HotSpot's performance data (hsperfdata) without
// attaching to the JVM: every HotSpot JVM started without -XX:-UsePerfData
// (and without -XX:+PerfDisableSharedMem) keeps its counters in a memory
// mapped file, /tmp/hsperfdata_<user>/<pid>, which jstat reads too.
//
// The file (format version 2) is a prologue followed by entries:
//
//	prologue, 32 bytes:
//	  0  magic 0xcafec0c0 (always these bytes, whatever the byte order)
//	  4  byte order: 0 big endian, 1 little endian (of everything below)
//	  5  major version (2), 6 minor version
//	  7  accessible: 1 once the JVM has finished setting the file up
//	  8  used: bytes of the file in use      12 overflow
//	  16 modification time stamp (int64)     24 offset of the first entry
//	  28 number of entries
//	entry, at its offset:
//	  0  entry length (the next entry starts there)
//	  4  name offset (from the entry; a NUL-terminated name)
//	  8  vector length (0: a scalar)
//	  12 data type ('J' int64, 'B' byte vector for strings, ...)
//	  13 flags  14 units  15 variability
//	  16 data offset (from the entry)
//
// A Layout is the result of parsing a file once: the offsets of the
// counters taskscope reads. Reading values again is then a matter of one
// read of the file's first bytes (see Reader), not of parsing it again.
package hsperf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Magic is the first four bytes of a hsperfdata file, read as big endian.
const Magic = 0xcafec0c0

// PrologueSize is the size of the prologue.
const PrologueSize = 32

const entryHeaderSize = 20

// MaxFileSize bounds what is read of a file (HotSpot's default is 32 KiB,
// -XX:PerfDataMemorySize raises it).
const MaxFileSize = 1 << 20

// Data types (the JVM's BasicType signature characters).
const (
	TypeLong = 'J'
	TypeByte = 'B'
)

// Units of an entry.
const (
	UnitNone   = 1
	UnitBytes  = 2
	UnitTicks  = 3
	UnitEvents = 4
	UnitString = 5
	UnitHertz  = 6
)

// Errors of Parse. Every error wraps ErrFormat.
var (
	ErrFormat       = errors.New("not a usable hsperfdata file")
	ErrNotReady     = fmt.Errorf("%w: the JVM has not finished setting it up", ErrFormat)
	ErrLayoutChange = errors.New("hsperfdata layout changed")
)

// Prologue is the header of a file.
type Prologue struct {
	Order       binary.ByteOrder
	Major       uint8
	Minor       uint8
	Accessible  bool
	Used        int32
	Overflow    int32
	ModTime     int64
	EntryOffset int32
	NumEntries  int32
}

// ParsePrologue reads the prologue at the start of b.
func ParsePrologue(b []byte) (Prologue, error) {
	var p Prologue
	if len(b) < PrologueSize {
		return p, fmt.Errorf("%w: %d bytes, shorter than the prologue", ErrFormat, len(b))
	}
	if m := binary.BigEndian.Uint32(b); m != Magic {
		return p, fmt.Errorf("%w: magic %#x", ErrFormat, m)
	}
	switch b[4] {
	case 0:
		p.Order = binary.BigEndian
	case 1:
		p.Order = binary.LittleEndian
	default:
		return p, fmt.Errorf("%w: byte order %d", ErrFormat, b[4])
	}
	p.Major, p.Minor, p.Accessible = b[5], b[6], b[7] != 0
	if p.Major != 2 {
		return p, fmt.Errorf("%w: version %d.%d (this reads version 2)", ErrFormat, p.Major, p.Minor)
	}
	o := p.Order
	p.Used = int32(o.Uint32(b[8:]))
	p.Overflow = int32(o.Uint32(b[12:]))
	p.ModTime = int64(o.Uint64(b[16:]))
	p.EntryOffset = int32(o.Uint32(b[24:]))
	p.NumEntries = int32(o.Uint32(b[28:]))
	return p, nil
}

// Entry is one counter of a file.
type Entry struct {
	Name        string
	Type        byte
	Units       uint8
	Variability uint8
	Vector      int // 0 for scalars
	Offset      int // of the data, from the start of the file
}

// Entries parses every entry of a whole file.
func Entries(b []byte) (Prologue, []Entry, error) {
	var out []Entry
	p, err := walk(b, func(e *Entry) { out = append(out, *e) })
	return p, out, err
}

// walk calls fn for each well-formed entry of b; it stops at the first
// malformed one and reports it.
func walk(b []byte, fn func(e *Entry)) (Prologue, error) {
	p, err := ParsePrologue(b)
	if err != nil {
		return p, err
	}
	if !p.Accessible {
		return p, ErrNotReady
	}
	end := len(b)
	if int(p.Used) >= PrologueSize && int(p.Used) < end {
		end = int(p.Used)
	}
	off := int(p.EntryOffset)
	if p.NumEntries < 0 || off < PrologueSize || off > end {
		return p, fmt.Errorf("%w: %d entries at offset %d of %d bytes", ErrFormat, p.NumEntries, off, end)
	}
	o := p.Order
	var e Entry
	for i := 0; i < int(p.NumEntries); i++ {
		if off+entryHeaderSize > end {
			return p, fmt.Errorf("%w: entry %d at offset %d runs past the %d bytes used", ErrFormat, i, off, end)
		}
		h := b[off : off+entryHeaderSize]
		length := int(int32(o.Uint32(h[0:])))
		nameOff := int(int32(o.Uint32(h[4:])))
		vec := int(int32(o.Uint32(h[8:])))
		dataOff := int(int32(o.Uint32(h[16:])))
		if length < entryHeaderSize || length > end-off {
			return p, fmt.Errorf("%w: entry %d at offset %d has length %d", ErrFormat, i, off, length)
		}
		ent := b[off : off+length]
		if nameOff < entryHeaderSize || nameOff >= length || dataOff < entryHeaderSize || dataOff > length || vec < 0 {
			return p, fmt.Errorf("%w: entry %d at offset %d: name at %d, data at %d, vector %d", ErrFormat, i, off, nameOff, dataOff, vec)
		}
		nul := -1
		for j := nameOff; j < length; j++ {
			if ent[j] == 0 {
				nul = j
				break
			}
		}
		if nul < 0 {
			return p, fmt.Errorf("%w: entry %d at offset %d: unterminated name", ErrFormat, i, off)
		}
		size := 8
		switch h[12] {
		case TypeLong:
			if vec > 0 {
				size = 8 * vec
			}
		case TypeByte:
			size = max(vec, 1)
		default:
			size = 0 // a type taskscope does not read
		}
		if size > length-dataOff {
			return p, fmt.Errorf("%w: entry %d at offset %d: %d data bytes at %d of %d", ErrFormat, i, off, size, dataOff, length)
		}
		e = Entry{Name: string(ent[nameOff:nul]), Type: h[12], Units: h[14], Variability: h[15], Vector: vec, Offset: off + dataOff}
		fn(&e)
		off += length
	}
	return p, nil
}

// String returns the value of a byte-vector entry as a string (up to its NUL).
func (e *Entry) String(b []byte) string {
	if e.Type != TypeByte || e.Offset >= len(b) {
		return ""
	}
	s := b[e.Offset:min(len(b), e.Offset+max(e.Vector, 1))]
	for i, c := range s {
		if c == 0 {
			s = s[:i]
			break
		}
	}
	return string(s)
}

// Snapshot is what taskscope takes from a JVM's counters at one instant.
type Snapshot struct {
	HeapUsed      int64 // bytes: the generations' spaces, used
	HeapCommitted int64 // bytes: the generations' capacities
	HeapMax       int64 // bytes: the generations' maximum capacities (-Xmx)
	MetaUsed      int64 // bytes: metaspace (or the permanent generation), used
	MetaCommitted int64
	MetaMax       int64
	GCCount       int64 // collections (all collectors)
	GCTimeMs      int64 // time in collections (pauses), milliseconds
	Threads       int64 // live Java threads
	Has           Has   // which of the above the JVM offers
}

// Has says which values of a Snapshot are known.
type Has uint8

// The values a JVM may lack.
const (
	HasHeap Has = 1 << iota
	HasMeta
	HasGC
	HasThreads
)

// Layout is where a file's counters are: parsed once, read many times.
type Layout struct {
	Prologue  Prologue
	order     binary.ByteOrder
	heapUsed  []int32 // offsets of int64 values to sum
	heapComm  []int32
	heapMax   []int32
	metaUsed  []int32
	metaComm  []int32
	metaMax   []int32
	gcCount   []int32
	gcTime    []int32
	threads   int32 // -1 if none
	g1        bool  // G1 reports the whole heap as each generation's maximum
	freq      int64 // sun.os.hrt.frequency: ticks per second
	vmStartMs int64 // sun.rt.createVmBeginTime
	end       int   // the reads need b[:end]
	Names     int   // entries parsed
}

// Span is how many bytes from the start of the file a Read needs.
func (l *Layout) Span() int { return l.end }

// VMStartMs is when the JVM began to start (unix ms), or 0 if unknown.
func (l *Layout) VMStartMs() int64 { return l.vmStartMs }

// generation parses "sun.gc.generation.<n>.rest" into n and rest.
func generation(name string) (int, string, bool) {
	rest, ok := strings.CutPrefix(name, "sun.gc.generation.")
	if !ok {
		return 0, "", false
	}
	num, rest, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, "", false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n > 64 {
		return 0, "", false
	}
	return n, rest, true
}

// NewLayout parses a whole file (b holds at least Prologue.Used bytes).
func NewLayout(b []byte) (*Layout, error) {
	l := &Layout{threads: -1}
	type genInfo struct {
		name                string
		used, comm, maxCaps []int32
		capacity, maxCap    int32 // the generation's own capacity and maxCapacity, -1 if none
		hasCapacity         bool
	}
	gens := map[int]*genInfo{}
	gen := func(n int) *genInfo {
		g := gens[n]
		if g == nil {
			g = &genInfo{capacity: -1, maxCap: -1}
			gens[n] = g
		}
		return g
	}
	p, err := walk(b, func(e *Entry) {
		l.Names++
		if e.Type == TypeByte {
			switch {
			case e.Name == "sun.gc.policy.name":
				l.g1 = e.String(b) == "GarbageFirst"
			default:
				if n, rest, ok := generation(e.Name); ok && rest == "name" {
					gen(n).name = e.String(b)
				}
			}
			return
		}
		if e.Type != TypeLong || e.Vector != 0 {
			return
		}
		off := int32(e.Offset)
		switch e.Name {
		case "sun.os.hrt.frequency":
			l.freq = int64(p0order(b).Uint64(b[e.Offset:]))
			return
		case "sun.rt.createVmBeginTime":
			l.vmStartMs = int64(p0order(b).Uint64(b[e.Offset:]))
			return
		case "java.threads.live":
			l.threads = off
			return
		case "sun.gc.metaspace.used":
			l.metaUsed = append(l.metaUsed, off)
			return
		case "sun.gc.metaspace.capacity":
			l.metaComm = append(l.metaComm, off)
			return
		case "sun.gc.metaspace.maxCapacity":
			l.metaMax = append(l.metaMax, off)
			return
		}
		if rest, ok := strings.CutPrefix(e.Name, "sun.gc.collector."); ok {
			_, field, ok := strings.Cut(rest, ".")
			switch {
			case !ok:
			case field == "invocations":
				l.gcCount = append(l.gcCount, off)
			case field == "time":
				l.gcTime = append(l.gcTime, off)
			}
			return
		}
		n, rest, ok := generation(e.Name)
		if !ok {
			return
		}
		g := gen(n)
		switch {
		case rest == "capacity":
			g.capacity, g.hasCapacity = off, true
		case rest == "maxCapacity":
			g.maxCap = off
		case strings.HasPrefix(rest, "space."):
			// space.<s>.used / capacity / maxCapacity
			_, field, ok := strings.Cut(rest[len("space."):], ".")
			if !ok {
				return
			}
			switch field {
			case "used":
				g.used = append(g.used, off)
			case "capacity":
				g.comm = append(g.comm, off)
			case "maxCapacity":
				g.maxCaps = append(g.maxCaps, off)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	l.Prologue, l.order = p, p.Order
	// The heap is every generation but the permanent one (Java 7 and
	// older), which counts as metadata like the metaspace.
	for n := 0; n <= 64; n++ {
		g := gens[n]
		if g == nil {
			continue
		}
		if g.name == "perm" {
			l.metaUsed = append(l.metaUsed, g.used...)
			if g.capacity >= 0 {
				l.metaComm = append(l.metaComm, g.capacity)
			}
			if g.maxCap >= 0 {
				l.metaMax = append(l.metaMax, g.maxCap)
			}
			continue
		}
		l.heapUsed = append(l.heapUsed, g.used...)
		if g.hasCapacity {
			l.heapComm = append(l.heapComm, g.capacity)
		} else {
			l.heapComm = append(l.heapComm, g.comm...) // Parallel GC reports its spaces' capacities only
		}
		if g.maxCap >= 0 {
			l.heapMax = append(l.heapMax, g.maxCap)
		} else {
			l.heapMax = append(l.heapMax, g.maxCaps...)
		}
	}
	if l.freq <= 0 {
		l.freq = 1e9 // Linux HotSpot counts nanoseconds
	}
	l.end = PrologueSize
	for _, offs := range [][]int32{l.heapUsed, l.heapComm, l.heapMax, l.metaUsed, l.metaComm, l.metaMax, l.gcCount, l.gcTime, {l.threads}} {
		for _, off := range offs {
			l.end = max(l.end, int(off)+8)
		}
	}
	return l, nil
}

// p0order is the byte order of the file b (valid after ParsePrologue succeeded).
func p0order(b []byte) binary.ByteOrder {
	if b[4] == 0 {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// Read takes the values out of b, which holds at least the layout's Span
// bytes of the same file. It reports ErrLayoutChange when the prologue says
// entries were added since the layout was parsed: parse again then.
func (l *Layout) Read(b []byte, s *Snapshot) error {
	if len(b) < l.end {
		return fmt.Errorf("%w: %d bytes, the layout needs %d", ErrLayoutChange, len(b), l.end)
	}
	o := l.order
	if binary.BigEndian.Uint32(b) != Magic || int32(o.Uint32(b[28:])) != l.Prologue.NumEntries || int32(o.Uint32(b[8:])) != l.Prologue.Used {
		return ErrLayoutChange
	}
	sum := func(offs []int32) int64 {
		var v int64
		for _, off := range offs {
			v += int64(o.Uint64(b[off:]))
		}
		return v
	}
	maxOf := func(offs []int32) int64 {
		var v int64
		for _, off := range offs {
			v = max(v, int64(o.Uint64(b[off:])))
		}
		return v
	}
	*s = Snapshot{}
	if len(l.heapUsed) > 0 {
		s.Has |= HasHeap
		s.HeapUsed, s.HeapCommitted = sum(l.heapUsed), sum(l.heapComm)
		if l.g1 {
			s.HeapMax = maxOf(l.heapMax) // each G1 generation may grow to the whole heap
		} else {
			s.HeapMax = sum(l.heapMax)
		}
		if s.HeapMax > 0 && s.HeapCommitted > s.HeapMax {
			s.HeapCommitted = s.HeapMax // G1 counts a few bytes of bookkeeping in each generation
		}
	}
	if len(l.metaUsed) > 0 {
		s.Has |= HasMeta
		s.MetaUsed, s.MetaCommitted, s.MetaMax = sum(l.metaUsed), sum(l.metaComm), sum(l.metaMax)
	}
	if len(l.gcCount) > 0 || len(l.gcTime) > 0 {
		s.Has |= HasGC
		s.GCCount = sum(l.gcCount)
		s.GCTimeMs = ticksToMs(sum(l.gcTime), l.freq)
	}
	if l.threads >= 0 {
		s.Has |= HasThreads
		s.Threads = int64(o.Uint64(b[l.threads:]))
	}
	return nil
}

// ticksToMs converts high-resolution ticks to milliseconds without overflow.
func ticksToMs(ticks, freq int64) int64 {
	if ticks <= 0 || freq <= 0 {
		return 0
	}
	return ticks/freq*1000 + int64(float64(ticks%freq)*1000/float64(freq))
}

// Parse reads a whole file's snapshot (for tools and tests; the agent keeps
// a Layout and a Reader).
func Parse(b []byte) (Snapshot, error) {
	var s Snapshot
	l, err := NewLayout(b)
	if err != nil {
		return s, err
	}
	err = l.Read(b, &s)
	return s, err
}
