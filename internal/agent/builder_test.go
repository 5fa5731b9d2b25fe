package agent

import (
	"slices"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/wire"
)

// The builder's buffers serve batch after batch: what a batch says is its
// own samples only (no stale values or absent bits from the last), and a
// series that had no samples in a batch is dropped.
func TestBuilderRecycles(t *testing.T) {
	b := newBuilder([]string{"a", "b"}, []string{"c"})
	// Batch 1: process 1 has "b" absent at its first sample; process 2 too.
	b.ProcessSample(1, 1000, []int64{10, 0}, 0b01)
	b.ProcessSample(1, 2000, []int64{11, 21}, 0b11)
	b.ProcessSample(2, 1000, []int64{5, 0}, 0b01)
	b.AttemptSample("x", 1000, []int64{7}, 0b1)
	b1 := b.take("h", wire.AgentStats{})
	if len(b1.ProcSeries) != 2 || len(b1.ProcSeries[0].Times) != 2 || b1.ProcSeries[0].Columns[1].Absent[0] != 0b01 {
		t.Fatalf("batch 1: %+v", b1.ProcSeries)
	}
	// Batch 2: process 1 again, every value present; process 2 is gone.
	b.ProcessSample(1, 3000, []int64{12, 22}, 0b11)
	b.ProcessSample(3, 3000, []int64{1, 2}, 0b11)
	b2 := b.take("h", wire.AgentStats{})
	if len(b2.ProcSeries) != 2 || b2.ProcSeries[0].Key != 1 || b2.ProcSeries[1].Key != 3 {
		t.Fatalf("batch 2 series: %+v", b2.ProcSeries)
	}
	s := b2.ProcSeries[0]
	if !slices.Equal(s.Times, []int64{3000}) || !slices.Equal(s.Columns[0].Values, []int64{12}) ||
		!slices.Equal(s.Columns[1].Values, []int64{22}) || s.Columns[1].Absent != nil {
		t.Errorf("process 1 in batch 2: %+v", s)
	}
	if len(b2.AttemptSeries) != 0 {
		t.Errorf("attempt series without samples: %+v", b2.AttemptSeries)
	}
	if _, ok := b.procSer[2]; ok {
		t.Error("process 2's buffers kept after a batch without its samples")
	}
	if _, ok := b.attSer["x"]; ok {
		t.Error("attempt x's buffers kept after a batch without its samples")
	}
	if _, ok := b.procSer[1]; !ok {
		t.Error("process 1's buffers dropped")
	}
	// A steady batch allocates nothing: the batch, its lists of series and
	// their columns are the builder's, kept for the next (7 allocations
	// for this one before).
	b.ProcessSample(1, 4000, []int64{13, 23}, 0b11)
	b.take("h", wire.AgentStats{})
	ms := int64(5000)
	if n := testing.AllocsPerRun(20, func() {
		for i := 0; i < 5; i++ {
			ms += 1000
			b.ProcessSample(1, ms, []int64{13, 23}, 0b11)
			b.ProcessSample(3, ms, []int64{13, 23}, 0b11)
		}
		b.take("h", wire.AgentStats{})
	}); n != 0 {
		t.Errorf("%v allocations per batch of 2 series", n)
	}
}

// TestFlushEvery: a batch every 5 intervals, at least 5 s and at most 10 s
// apart.
func TestFlushEvery(t *testing.T) {
	for _, c := range []struct{ interval, want time.Duration }{
		{100 * time.Millisecond, 5 * time.Second},
		{250 * time.Millisecond, 5 * time.Second},
		{time.Second, 5 * time.Second},
		{1500 * time.Millisecond, 7500 * time.Millisecond},
		{2 * time.Second, 10 * time.Second},
		{30 * time.Second, 10 * time.Second},
	} {
		if got := flushEvery(c.interval); got != c.want {
			t.Errorf("flushEvery(%v) = %v, want %v", c.interval, got, c.want)
		}
	}
}

// TestBuilderChurn: under churn most series are a process's one or two
// samples. Their buffers go back to the builder when they are dropped and
// serve new processes' series without leaking what they held (values,
// absent bits), and a new series costs no allocation per column.
func TestBuilderChurn(t *testing.T) {
	b := newBuilder([]string{"a", "b", "c"}, []string{"x"})
	key := uint64(100)
	ms := int64(0)
	batch := func(n int, present uint64) *wire.Batch {
		for i := 0; i < n; i++ {
			key++
			ms += 250
			b.ProcessSample(key, ms, []int64{int64(key), 2, 3}, present)
		}
		return b.take("h", wire.AgentStats{})
	}
	batch(10, 0b011) // "c" absent
	batch(10, 0b111)
	// The first batch's buffers are spare now (their series had no samples
	// in the second): the third batch's new series take them.
	if len(b.spare) != 10 {
		t.Fatalf("%d spare buffers after a batch without the first's series, want 10", len(b.spare))
	}
	b3 := batch(10, 0b111)
	if len(b3.ProcSeries) != 10 {
		t.Fatalf("%d series", len(b3.ProcSeries))
	}
	for _, s := range b3.ProcSeries {
		if len(s.Times) != 1 || len(s.Columns) != 3 || s.Columns[0].Values[0] != int64(s.Key) {
			t.Fatalf("series %d: %+v", s.Key, s)
		}
		for _, c := range s.Columns {
			if c.Absent != nil || len(c.Values) != 1 {
				t.Errorf("series %d column %d: %+v (an old absent bit or value)", s.Key, c.Metric, c)
			}
		}
	}
	// A series of many samples grows past its first array, each column on
	// its own, with its values intact.
	for i := 0; i < 3*seriesFirst; i++ {
		ms += 250
		present := uint64(0b111)
		if i < 8 {
			present = 0b101
		}
		b.ProcessSample(1, ms, []int64{int64(i), int64(10 * i), int64(100 * i)}, present)
	}
	long := b.take("h", wire.AgentStats{}).ProcSeries[0]
	for i := 0; i < 3*seriesFirst; i++ {
		wantB := int64(10 * i)
		if i < 8 {
			wantB = 0
		}
		if long.Columns[0].Values[i] != int64(i) || long.Columns[1].Values[i] != wantB || long.Columns[2].Values[i] != int64(100*i) {
			t.Fatalf("sample %d of a long series: %+v", i, long.Columns)
		}
	}
	if len(long.Columns[1].Absent) != (3*seriesFirst+7)/8 || long.Columns[1].Absent[0] != 0xff || long.Columns[1].Absent[1] != 0 {
		t.Errorf("absent bits of a long series: %v", long.Columns[1].Absent)
	}
	// Steady churn: a batch of 10 new one-sample series allocates nothing
	// (106 allocations before the buffers were kept, 26 before the batch's
	// own structures were).
	batch(10, 0b111)
	if n := testing.AllocsPerRun(20, func() { batch(10, 0b111) }); n > 1 {
		t.Errorf("%v allocations per batch of 10 new series", n)
	}
}
