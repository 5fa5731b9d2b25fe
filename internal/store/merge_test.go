package store

import (
	"math"
	"reflect"
	"testing"

	"github.com/taskscope/taskscope/internal/wire"
)

func TestMergeAttempt(t *testing.T) {
	full := wire.Attempt{AttemptID: "a", JobID: "job_1", AppID: "application_1", ContainerID: "c1", Type: "map",
		Framework: "mapreduce", FirstMs: 1000, LastMs: 2000, JobName: "wc", User: "alice", Queue: "q", MemoryMB: 2048,
		JavaOpts: "-Xmx1g", XmxBytes: 1 << 30, Streaming: true}
	for _, c := range []struct {
		name     string
		dst, src wire.Attempt
		want     wire.Attempt
	}{
		{name: "first description", dst: wire.Attempt{AttemptID: "a"}, src: full, want: full},
		{name: "a later one that says little erases nothing", dst: full,
			src:  wire.Attempt{AttemptID: "a", LastMs: 3000, Framework: "unknown"},
			want: func() wire.Attempt { w := full; w.LastMs = 3000; return w }()},
		{name: "the later wins field by field", dst: full,
			src: wire.Attempt{AttemptID: "a", JobName: "wc2", User: "bob", Queue: "q2", Type: "reduce", MemoryMB: 4096,
				XmxBytes: 2 << 30, JavaOpts: "-Xmx2g", Framework: "tez", ContainerID: "c2", AppID: "application_2"},
			want: wire.Attempt{AttemptID: "a", JobID: "job_1", AppID: "application_2", ContainerID: "c2", Type: "reduce",
				Framework: "tez", FirstMs: 1000, LastMs: 2000, JobName: "wc2", User: "bob", Queue: "q2", MemoryMB: 4096,
				JavaOpts: "-Xmx2g", XmxBytes: 2 << 30, Streaming: true}},
		{name: "an attempt's job does not change", dst: full, src: wire.Attempt{AttemptID: "a", JobID: "job_2"}, want: full},
		{name: "the earliest first, the latest last", dst: full,
			src:  wire.Attempt{AttemptID: "a", FirstMs: 500, LastMs: 1500},
			want: func() wire.Attempt { w := full; w.FirstMs = 500; return w }()},
		{name: "a first sighting is taken when there was none", dst: wire.Attempt{AttemptID: "a", LastMs: 900},
			src: wire.Attempt{AttemptID: "a", FirstMs: 800}, want: wire.Attempt{AttemptID: "a", FirstMs: 800, LastMs: 900}},
		{name: "ended stays ended", dst: func() wire.Attempt { w := full; w.Ended = true; return w }(),
			src:  wire.Attempt{AttemptID: "a", LastMs: 2500},
			want: func() wire.Attempt { w := full; w.Ended = true; w.LastMs = 2500; return w }()},
		{name: "a framework known is not replaced by unknown", dst: wire.Attempt{AttemptID: "a", Framework: "spark"},
			src: wire.Attempt{AttemptID: "a", Framework: "unknown"}, want: wire.Attempt{AttemptID: "a", Framework: "spark"}},
		{name: "a CPU doubt only grows", dst: func() wire.Attempt { w := full; w.CPUDoubtMs = 240; return w }(),
			src:  wire.Attempt{AttemptID: "a", CPUDoubtMs: 90},
			want: func() wire.Attempt { w := full; w.CPUDoubtMs = 240; return w }()},
		{name: "a CPU doubt told later", dst: full, src: wire.Attempt{AttemptID: "a", Ended: true, CPUDoubtMs: 90},
			want: func() wire.Attempt { w := full; w.Ended, w.CPUDoubtMs = true, 90; return w }()},
		{name: "unknown is taken when nothing is known", dst: wire.Attempt{AttemptID: "a"},
			src: wire.Attempt{AttemptID: "a", Framework: "unknown"}, want: wire.Attempt{AttemptID: "a", Framework: "unknown"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst, src := c.dst, c.src
			srcBefore := src
			MergeAttempt(&dst, &src)
			if !reflect.DeepEqual(dst, c.want) {
				t.Errorf("got  %+v\nwant %+v", dst, c.want)
			}
			if !reflect.DeepEqual(src, srcBefore) {
				t.Errorf("src changed: %+v", src)
			}
		})
	}
}

// Three batches of an attempt, merged one by one, give the summary of the
// three as one: peaks and counters, and the RSS integral across the gaps
// between batches.
func TestMergeSummary(t *testing.T) {
	// RSS 100 at t=1000..3000, 300 at 4000..5000, 100 at 7000 (as three
	// batches: [1000,3000], [4000,5000], [7000]).
	b1 := AttemptSummary{FirstMs: 1000, FirstRSS: 100, LastMs: 3000, LastRSS: 100, RSSByteMs: 100 * 2000, PeakRSS: 100,
		CPUMs: 10, ReadBytes: 5, PeakHeap: 7}
	b2 := AttemptSummary{FirstMs: 4000, FirstRSS: 300, LastMs: 5000, LastRSS: 300, RSSByteMs: 300 * 1000, PeakRSS: 300,
		CPUMs: 30, ReadBytes: 9, GCTimeMs: 4, PeakPSS: 250, SchedWaitMs: 3}
	b3 := AttemptSummary{FirstMs: 7000, FirstRSS: 100, LastMs: 7000, LastRSS: 100, CPUMs: 35, PeakRSS: 100, WriteBytes: 8,
		PeakVMS: 900}
	var got AttemptSummary
	for _, b := range []AttemptSummary{b1, b2, b3} {
		before := b
		MergeSummary(&got, &b)
		if b != before {
			t.Fatalf("the batch's summary changed: %+v", b)
		}
	}
	// The integral: 200,000 + (100+300)/2×1000 + 300,000 + (300+100)/2×2000.
	wantInt := 200_000.0 + 200_000 + 300_000 + 400_000
	want := AttemptSummary{FirstMs: 1000, FirstRSS: 100, LastMs: 7000, LastRSS: 100, RSSByteMs: wantInt, PeakRSS: 300,
		PeakPSS: 250, PeakVMS: 900, PeakHeap: 7, CPUMs: 35, ReadBytes: 9, WriteBytes: 8, GCTimeMs: 4, SchedWaitMs: 3}
	if got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	// A batch that overlaps what came before (an agent's retry of samples
	// already summed) adds no gap, and does not move the last point back.
	again := got
	old := AttemptSummary{FirstMs: 2000, FirstRSS: 100, LastMs: 3000, LastRSS: 100, CPUMs: 12}
	MergeSummary(&again, &old)
	if again.RSSByteMs != wantInt || again.LastMs != 7000 || again.LastRSS != 100 || again.CPUMs != 35 {
		t.Errorf("an earlier batch merged late: %+v", again)
	}
	if math.IsNaN(again.RSSByteMs) {
		t.Fatal("NaN")
	}
}

func TestAttemptSpan(t *testing.T) {
	for _, c := range []struct {
		m           wire.Attempt
		s           AttemptSummary
		first, last int64
	}{
		{wire.Attempt{FirstMs: 100, LastMs: 900}, AttemptSummary{FirstMs: 150, LastMs: 1000}, 100, 1000},
		{wire.Attempt{}, AttemptSummary{FirstMs: 150, LastMs: 1000}, 150, 1000}, // samples before any description
		{wire.Attempt{FirstMs: 100, LastMs: 2000}, AttemptSummary{FirstMs: 150, LastMs: 1000}, 100, 2000},
	} {
		if f, l := AttemptSpan(&c.m, &c.s); f != c.first || l != c.last {
			t.Errorf("AttemptSpan(%+v, %+v) = %d, %d; want %d, %d", c.m, c.s, f, l, c.first, c.last)
		}
	}
}

// SummarizeBatch says what Prepare says of each attempt.
func TestSummarizeBatch(t *testing.T) {
	b := &wire.Batch{Version: wire.Version, AgentID: "a", Seq: 1, Host: "h",
		Metrics: []string{wire.AttemptCPUMs, wire.AttemptRSSBytes, wire.AttemptSchedWaitNs, "x_other"},
		AttemptSeries: []wire.Series{
			{AttemptID: "a1", Times: []int64{1000, 2000, 3000}, Columns: []wire.Column{{Metric: 0, Values: []int64{5, 9, 14}},
				{Metric: 1, Values: []int64{100, 300, 200}}, {Metric: 2, Values: []int64{2e6, 3e6, 7e6}}}},
			{AttemptID: "a2", Times: []int64{1500}, Columns: []wire.Column{{Metric: 1, Values: []int64{50}},
				{Metric: 3, Values: []int64{1}}}},
		}}
	if err := wire.Validate(b); err != nil {
		t.Fatal(err)
	}
	got := SummarizeBatch(b)
	if !reflect.DeepEqual(got, Prepare(b).Atts) {
		t.Errorf("SummarizeBatch %v, Prepare %v", got, Prepare(b).Atts)
	}
	a1 := got["a1"]
	if a1 == nil || a1.CPUMs != 14 || a1.PeakRSS != 300 || a1.SchedWaitMs != 7 || a1.FirstMs != 1000 || a1.LastMs != 3000 ||
		a1.LastRSS != 200 || a1.RSSByteMs != 200*1000+250*1000 {
		t.Errorf("a1: %+v", a1)
	}
	if a2 := got["a2"]; a2 == nil || a2.PeakRSS != 50 || a2.RSSByteMs != 0 || a2.FirstRSS != 50 {
		t.Errorf("a2: %+v", a2)
	}
}

func TestAttemptOf(t *testing.T) {
	m := wire.Attempt{AttemptID: "a", JobID: "j", AppID: "app", ContainerID: "c", Type: "map", Framework: "mapreduce",
		FirstMs: 1000, LastMs: 5000, Ended: true, JobName: "wc", User: "u", Queue: "q", MemoryMB: 2048, VCores: 2, JavaOpts: "-Xmx1g",
		XmxBytes: 1 << 30, Streaming: true, FileExit: wire.ExitStatus{Status: 1, Ms: 5000}, ExitDiagnostics: "exit code 1",
		CPUDoubtMs: 11}
	s := AttemptSummary{FirstMs: 1200, LastMs: 6000, CPUMs: 1, PeakRSS: 2, PeakPSS: 3, PeakVMS: 4, PeakHeap: 5, ReadBytes: 6,
		WriteBytes: 7, GCTimeMs: 8, SchedWaitMs: 9, RSSByteMs: 10}
	a := AttemptOf(&m, "h", &s, 3, 0)
	// Every field the API shows is filled from what was given: a field
	// added to Attempt and not mapped here fails.
	v := reflect.ValueOf(a)
	for i := 0; i < v.NumField(); i++ {
		switch v.Type().Field(i).Name {
		case "RetryOf", "Speculative":
			continue // LinkAttempts' (TestLinkAttempts)
		}
		if v.Field(i).IsZero() {
			t.Errorf("AttemptOf leaves %s empty", v.Type().Field(i).Name)
		}
	}
	if a.Start != 1000 || a.LastSeen != 6000 || a.End != 6000 || a.DurationMs != 5000 || a.State != StateFinished ||
		a.Processes != 3 || a.Host != "h" || a.CPUMs != 1 || a.SchedWaitMs != 9 {
		t.Errorf("%+v", a)
	}
	m.Ended, m.Type, m.Framework = false, "", ""
	for _, c := range []struct {
		stale int64
		state string
		end   Time
	}{{6000, StateRunning, 0}, {6001, StateLost, 6000}} {
		a := AttemptOf(&m, "h", &s, 3, c.stale)
		if a.State != c.state || a.End != c.end || a.Type != "unknown" || a.Framework != "unknown" {
			t.Errorf("stale before %d: %s, end %d, type %q, framework %q", c.stale, a.State, a.End, a.Type, a.Framework)
		}
	}
}
