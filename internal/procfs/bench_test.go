package procfs

import (
	"os"
	"testing"
)

func benchParse(b *testing.B, file string, parse func([]byte) error) {
	in := fixture(b, file)
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if err := parse(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseStat(b *testing.B) {
	var s Stat
	benchParse(b, "14599/stat", func(in []byte) error { return ParseStat(in, &s) })
}

func BenchmarkParseStatus(b *testing.B) {
	var s Status
	benchParse(b, "14599/status", func(in []byte) error { return ParseStatus(in, &s) })
}

func BenchmarkParseIO(b *testing.B) {
	var io IO
	benchParse(b, "14599/io", func(in []byte) error { return ParseIO(in, &io) })
}

func BenchmarkParseSchedstat(b *testing.B) {
	var s Schedstat
	benchParse(b, "14599/schedstat", func(in []byte) error { return ParseSchedstat(in, &s) })
}

func BenchmarkParseSmapsRollup(b *testing.B) {
	var s SmapsRollup
	benchParse(b, "14599/smaps_rollup", func(in []byte) error { return ParseSmapsRollup(in, &s) })
}

// BenchmarkParseDirents decodes the listing of a /proc with 300 processes.
func BenchmarkParseDirents(b *testing.B) {
	names := []string{".", "..", "fs", "bus", "irq", "sys", "tty", "acpi", "self", "thread-self", "stat", "uptime"}
	for pid := 1; len(names) < 312; pid += 37 {
		names = append(names, itoa(pid))
	}
	buf := direntBuf(names...)
	dst := make([]PidEntry, 0, 512)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if dst = parseDirents(buf, dst[:0]); len(dst) != 300 {
			b.Fatal(len(dst))
		}
	}
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}

// BenchmarkProcReadStat is one tick's read of a held stat file, parsed.
func BenchmarkProcReadStat(b *testing.B) {
	p := NewFS("").OpenProc(int32(os.Getpid()))
	defer p.Close()
	buf := make([]byte, 0, 4096)
	var s Stat
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = p.Read(FileStat, buf); err != nil {
			b.Fatal(err)
		}
		if err := ParseStat(buf, &s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkListProc lists the live /proc.
func BenchmarkListProc(b *testing.B) {
	l := NewFS("").NewLister()
	var ents []PidEntry
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if ents, err = l.List(ents[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseStatusCtx(b *testing.B) {
	var s Status
	benchParse(b, "14599/status", func(in []byte) error { return ParseStatusCtx(in, &s) })
}
