package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// Fill appends the generator's rounds into st until tick end, one
// transaction per round, with maintenance every 30 simulated seconds as
// the server runs it, then writes the summaries. It returns the simulated
// time reached. Benchmarks use it to set up a store.
func Fill(tb testing.TB, st store.Store, g *loadgen.Generator, start time.Time, end int) time.Time {
	tb.Helper()
	return FillAt(tb, st, g, start, end, nil)
}

// FillAt is Fill that tells at (nil: no one) each round's time before it
// is stored: a test sets its store's clock by it, so that the store
// writes each round's data when it comes, as a server does.
func FillAt(tb testing.TB, st store.Store, g *loadgen.Generator, start time.Time, end int, at func(time.Time)) time.Time {
	tb.Helper()
	return FillRounds(tb, st, start, func() ([]*wire.Batch, time.Time) {
		if g.Tick() >= end {
			return nil, time.Time{}
		}
		batches := g.Next()
		if batches == nil {
			batches = []*wire.Batch{} // (an empty round: not the end)
		}
		now := start.Add(time.Duration(g.Tick()) * time.Second)
		if at != nil {
			at(now)
		}
		return batches, now
	})
}

// FillRounds appends rounds into st, one transaction per round, with
// maintenance every 30 simulated seconds from start as the server runs
// it, then writes the summaries. It returns the simulated time reached.
func FillRounds(tb testing.TB, st store.Store, start time.Time, next loadgen.Rounds) time.Time {
	tb.Helper()
	ctx := context.Background()
	last := start
	now := start
	for {
		batches, t := next()
		if batches == nil {
			break
		}
		now = t
		app, err := st.Begin(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		for _, bt := range batches {
			if _, err := app.Append(bt); err != nil {
				tb.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			tb.Fatal(err)
		}
		if now.Sub(last) >= 30*time.Second {
			last = now
			if err := st.Maintain(ctx, now); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := st.Flush(ctx); err != nil {
		tb.Fatal(err)
	}
	return now
}

// Attempts lists every attempt of every job st holds (up to 1,000 jobs), job
// by job.
func Attempts(tb testing.TB, st store.Store) []store.Attempt {
	tb.Helper()
	ctx := context.Background()
	page, err := st.Jobs(ctx, store.JobFilter{Limit: 1000})
	if err != nil {
		tb.Fatal(err)
	}
	var atts []store.Attempt
	for _, j := range page.Jobs {
		d, err := st.Job(ctx, j.JobID)
		if err != nil {
			tb.Fatal(err)
		}
		atts = append(atts, d.AttemptList...)
	}
	return atts
}

// LateRSS is a batch from agent (seq) with one sample of an attempt's RSS
// (rss bytes) at ts, the attempt seen from first: a test stores it after
// later samples of the attempt, as an agent's batch that came late.
func LateRSS(tb testing.TB, agent string, seq uint64, attemptID, jobID string, first, ts, rss int64) *wire.Batch {
	tb.Helper()
	b := &wire.Batch{Version: wire.Version, AgentID: agent, Seq: seq, Host: "late-host", Metrics: []string{wire.AttemptRSSBytes}}
	b.Attempts = []wire.Attempt{{AttemptID: attemptID, JobID: jobID, Type: "map", Framework: "mapreduce", FirstMs: first,
		LastMs: ts}}
	b.AttemptSeries = []wire.Series{{AttemptID: attemptID, Times: []int64{ts}, Columns: []wire.Column{{Metric: 0, Values: []int64{rss}}}}}
	if err := wire.Validate(b); err != nil {
		tb.Fatal(err)
	}
	return b
}
