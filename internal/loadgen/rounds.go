package loadgen

import (
	"time"

	"github.com/taskscope/taskscope/internal/wire"
)

// Rounds gives a cluster's batches a round at a time, with the time the
// round is of (its last batch's), and nil at the end: what a store's
// steady-state benchmarks append, a transaction a round.
type Rounds func() ([]*wire.Batch, time.Time)

// GeneratorRounds are loadgen's cluster (nodes × 8 attempts, a batch per
// node every 5 s, seed 1) from start for hours: a round is every node's
// batch.
func GeneratorRounds(nodes int, hours float64, start time.Time) Rounds {
	g := NewGenerator(Config{Nodes: nodes, Slots: 8, BatchTicks: 5, Seed: 1, Start: start})
	rounds := int(hours * 3600 / 5)
	i := 0
	return func() ([]*wire.Batch, time.Time) {
		if i == rounds {
			return nil, time.Time{}
		}
		i++
		return g.Next(), start.Add(time.Duration(i*5) * time.Second)
	}
}

// ReplayRounds are a recording replayed on nodes from start, pass after
// pass for hours: a round is one recorded batch's worth of every node.
func ReplayRounds(rec []*wire.Batch, nodes int, hours float64, start time.Time) Rounds {
	r := NewReplay(rec, nodes)
	passes := int(hours * 3600_000 / float64(r.Span()))
	var cur []*wire.Batch
	pass, next := 0, 0
	return func() ([]*wire.Batch, time.Time) {
		if next >= len(cur) {
			if pass == passes {
				return nil, time.Time{}
			}
			cur, next = r.Pass(start.UnixMilli()), 0
			pass++
		}
		end := min(next+nodes, len(cur))
		out := cur[next:end]
		next = end
		return out, time.UnixMilli(out[len(out)-1].SentMs)
	}
}
