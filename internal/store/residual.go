package store

import (
	"fmt"
	"sort"

	"github.com/taskscope/taskscope/internal/store/chunk"
)

// An attempt's samples are sums, made by the agent, of its processes'
// samples at the same tick. A store that keeps the processes' series can
// keep an attempt's as its difference from those sums (chunk format 4,
// docs/storage.md): mostly zeros (heap and schedstat differ by their
// rounding to KiB and ms). SubtractProcesses makes it, AddProcesses
// undoes it, exactly: the arithmetic is the same, on the same samples.

// AttemptSums are, for each of AttemptColumns, the SampleColumns the
// agent adds up into it (processes: the count of processes sampled;
// short_lived: none, those processes have no series).
var AttemptSums = func() [][]int {
	p := func(names ...string) []int {
		var out []int
		for _, n := range names {
			out = append(out, ColumnIndex(SampleColumns, n))
		}
		return out
	}
	sums := make([][]int, len(AttemptColumns))
	sums[aCPU] = p("cpu_user_ms", "cpu_sys_ms", "cpu_children_user_ms", "cpu_children_sys_ms")
	sums[aRSS] = p("rss_kb")
	sums[aPSS] = p("pss_kb")
	sums[aVMS] = p("vms_kb")
	sums[aRead] = p("read_bytes")
	sums[aWrite] = p("write_bytes")
	sums[aHeap] = p("heap_used_kb")
	sums[aGC] = p("gc_time_ms")
	sums[aWait] = p("sched_wait_ms")
	return sums
}()

// SubtractProcesses subtracts from att, in place, the sums of procs'
// samples (SampleColumns) at att's times: from each present value of a
// column, its AttemptSums of every process with a sample at that time;
// from processes, one a process. matched[k] are the indexes of att's
// times at which procs[k] has a sample (in order).
func SubtractProcesses(att *Points, procs []*Points) (matched [][]int) {
	matched = make([][]int, len(procs))
	for k, pp := range procs {
		matchTimes(att.Times, pp.Times, func(i, pi int) {
			matched[k] = append(matched[k], i)
			for j := range att.Cols {
				if att.present(j, i) {
					att.Cols[j][i] -= sampleSum(pp, j, pi)
				}
			}
		})
	}
	return matched
}

// sampleSum is what attempt column j holds of process p's sample pi.
func sampleSum(p *Points, j, pi int) int64 {
	if j == aProcs {
		return 1
	}
	var v int64
	for _, src := range AttemptSums[j] {
		if p.present(src, pi) {
			v += p.Cols[src][pi]
		}
	}
	return v
}

// matchTimes calls fn with each pair of indexes at which a (increasing)
// and b (increasing) have the same time.
func matchTimes(a, b []int64, fn func(i, bi int)) {
	if len(a) == 0 {
		return
	}
	bi := sort.Search(len(b), func(x int) bool { return b[x] >= a[0] })
	for i := 0; i < len(a) && bi < len(b); {
		switch {
		case a[i] < b[bi]:
			i++
		case a[i] > b[bi]:
			bi++
		default:
			fn(i, bi)
			i++
			bi++
		}
	}
}

// AddProcesses undoes SubtractProcesses on a decoded chunk of differences
// (of AttemptColumns): it adds procs' sums back at c's times, and checks
// that procs[k] has counts[k] samples at them, as it had when they were
// subtracted (else the chunk cannot be made whole again: an error).
func AddProcesses(c *chunk.Chunk, procs []*Points, counts []int) error {
	if len(procs) != len(counts) {
		return fmt.Errorf("%w: %d processes, %d counts", chunk.ErrCorrupt, len(procs), len(counts))
	}
	for k, pp := range procs {
		n := 0
		matchTimes(c.Times, pp.Times, func(i, pi int) {
			n++
			for ci := range c.Columns {
				col := &c.Columns[ci]
				if int(col.ID) >= len(AttemptColumns) || col.Absent != nil && col.Absent[i] {
					continue
				}
				col.Values[i] += sampleSum(pp, int(col.ID), pi)
			}
		})
		if n != counts[k] {
			return fmt.Errorf("cannot add an attempt's processes back: process %d of %d has %d samples at its times, %d were subtracted",
				k+1, len(procs), n, counts[k])
		}
	}
	return nil
}
