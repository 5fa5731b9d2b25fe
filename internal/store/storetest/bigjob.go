package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// BigJob stores a finished job of n attempts spread over hosts hosts
// (n/hosts each, named bigNNN.sim), started at start: nine maps to a
// reduce, each a YarnChild JVM sampled every second for 3 to 7 s, every
// 997th a straggler of 30 s; its attempt IDs are
// attempt_1700000000000_0777_{m,r}_NNNNNN_0 whatever jobID is (the web
// UI's tests and the analysis' benchmarks look at this job).
func BigJob(tb testing.TB, st store.Store, jobID string, n, hosts int, start time.Time) {
	tb.Helper()
	per := n / hosts
	var batches []*wire.Batch
	for h := 0; h < hosts; h++ {
		g := &Gen{Agent: fmt.Sprintf("agent-big-%03d", h), Host: fmt.Sprintf("big%03d.sim", h)}
		// Attempts by duration class, one batch each.
		groups := map[int][]*AttemptSpec{}
		for i := 0; i < per; i++ {
			idx := h*per + i
			typ, letter, num := "map", "m", idx
			if idx%10 == 9 {
				typ, letter, num = "reduce", "r", idx/10
			}
			d := 3 + idx%5
			if idx%997 == 0 {
				d = 30 // a straggler
			}
			a := &AttemptSpec{ID: fmt.Sprintf("attempt_1700000000000_0777_%s_%06d_0", letter, num), JobID: jobID, Type: typ,
				Container: fmt.Sprintf("container_1700000000000_0777_01_%06d", idx+2), JobName: "big-join", User: "etl", Queue: "etl",
				MemoryMB: 2048, Start: start.Add(time.Duration(i*2) * time.Second),
				Procs: []ProcSpec{{PID: int32(1000 + i), Role: wire.RoleTaskJVM, Cmdline: "java org.apache.hadoop.mapred.YarnChild", CPUPerS: int64(300 + idx%400), RSS: int64(200+idx%300) << 20}}}
			groups[d] = append(groups[d], a)
		}
		for d, atts := range groups {
			batches = append(batches, g.Batch(atts, 0, d, true))
		}
		if len(batches) > 50 {
			Ingest(tb, st, batches...)
			batches = batches[:0]
		}
	}
	Ingest(tb, st, batches...)
}
