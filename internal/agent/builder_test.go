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
	// A steady batch allocates only its own few structures (the batch, its
	// list of series, each series' list of columns), nothing per sample.
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
	}); n > 8 {
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
