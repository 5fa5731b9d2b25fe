package clickhouse

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Analyses are stored in groups (PutAnalysis): those put while the group
// before is inserted (and, with AnalysesEvery, within that pace of its
// insert) go in one insert per table (analyses, analysis_stamps). An
// insert of each analysis alone made two parts of it, merged again and
// again (an analyses row holds a whole report): at 3.5 jobs a second on a
// loaded machine, those parts and their merges took ClickHouse about as
// much time as the analysis' reads (BenchmarkKeepUp's part log).
//
// A put waits for its group's insert. The first put of a group starts it:
// it is inserted once the group before has been (one at a time), and
// AnalysesEvery after that one's insert began; the puts that come
// meanwhile join it. No pace by default: a put's wait is its worker's
// (the analyser's workers wait for their analyses to be stored). A put
// whose context ends before its group is inserted is left out of it.

// analysisPuts are the groups of a store.
type analysisPuts struct {
	mu        sync.Mutex
	gathering *analysisGroup // the group puts join (nil: none)
	next      time.Time      // when the next group may be inserted
	insert    sync.Mutex     // held by the group being inserted
}

type analysisGroup struct {
	puts []*analysisPut
	done chan struct{} // closed once inserted (or not): each put's err says
}

// analysisPut is one analysis' rows and what became of them.
type analysisPut struct {
	ctx        context.Context
	job        string
	row, stamp Block
	err        error
}

// putGrouped stores the rows of ps (of one context) with the others of
// their group; it returns the first error of theirs.
func (s *Store) putGrouped(ps ...*analysisPut) error {
	if len(ps) == 0 {
		return nil
	}
	w := &s.puts
	w.mu.Lock()
	g := w.gathering
	if g == nil {
		g = &analysisGroup{done: make(chan struct{})}
		w.gathering = g
		go s.insertGroup(g)
	}
	g.puts = append(g.puts, ps...)
	w.mu.Unlock()
	select {
	case <-g.done:
		for _, p := range ps {
			if p.err != nil {
				return p.err
			}
		}
		return nil
	case <-ps[0].ctx.Done():
		if len(ps) == 1 {
			return fmt.Errorf("cannot store the analysis of job %s: %w", ps[0].job, ps[0].ctx.Err())
		}
		return fmt.Errorf("cannot store the analyses of %d jobs (job %s first): %w", len(ps), ps[0].job, ps[0].ctx.Err())
	}
}

// insertGroup inserts g once the group before has been and its time has
// come.
func (s *Store) insertGroup(g *analysisGroup) {
	w := &s.puts
	w.insert.Lock()
	defer w.insert.Unlock()
	w.mu.Lock()
	wait := time.Until(w.next)
	w.mu.Unlock()
	if wait > 0 {
		time.Sleep(wait) // (puts join g meanwhile)
	}
	w.mu.Lock()
	w.gathering = nil
	w.next = time.Now().Add(s.opt.AnalysesEvery)
	puts := g.puts
	w.mu.Unlock()
	var rows, stamps Block
	var in []*analysisPut
	for _, p := range puts {
		if err := p.ctx.Err(); err != nil {
			p.err = fmt.Errorf("cannot store the analysis of job %s: %w", p.job, err)
			continue
		}
		rows.buf, rows.rows = append(rows.buf, p.row.buf...), rows.rows+p.row.rows
		stamps.buf, stamps.rows = append(stamps.buf, p.stamp.buf...), stamps.rows+p.stamp.rows
		in = append(in, p)
	}
	// (Not the puts' contexts: one that ends must not fail the others.)
	ctx := context.Background()
	err := s.insert(ctx, "analyses", analysisColumns, &rows)
	if err == nil {
		err = s.insert(ctx, "analysis_stamps", stampColumns, &stamps)
	}
	if err != nil {
		for _, p := range in {
			p.err = fmt.Errorf("cannot store the analysis of job %s: %w", p.job, err)
		}
	}
	close(g.done)
}
