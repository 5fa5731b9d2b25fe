package report

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s (go test -update rewrites it):\n%s", name, p, got)
	}
}

var t0 = store.Time(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMilli())

func attempt(id, typ, host string, start, dur, cpu int64, rss int64) store.Attempt {
	return store.Attempt{AttemptID: id, JobID: "job_1700000000000_0001", Host: host, Type: typ, State: store.StateFinished,
		Start: t0 + store.Time(start), End: t0 + store.Time(start+dur), DurationMs: dur, CPUMs: cpu, PeakRSS: rss, PeakPSS: rss * 9 / 10,
		Processes: 2, ReadBytes: 5 << 20, WriteBytes: 1 << 20, GCTimeMs: 120, MemoryMB: 2048}
}

func TestJob(t *testing.T) {
	j := &store.JobDetail{Job: store.Job{JobID: "job_1700000000000_0001", Framework: "mapreduce", Name: "wordcount \x1b[31mred\x1b[0m", User: "alice",
		Queue: "default", State: store.StateFinished, Start: t0, End: t0 + 400_000, LastSeen: t0 + 400_000, Attempts: 6,
		ByType: map[string]int{"map": 4, "reduce": 1, "am": 1}, Hosts: 2, CPUMs: 3_600_000, PeakRSS: 900 << 20, MemGBHours: 1.5, UsedGBHours: 0.4}}
	j.AttemptList = []store.Attempt{
		attempt("container_1700000000000_0001_01_000001", "am", "node1", 0, 400_000, 20_000, 300<<20),
		attempt("attempt_1700000000000_0001_m_000000_0", "map", "node1", 5_000, 60_000, 55_000, 500<<20),
		attempt("attempt_1700000000000_0001_m_000001_0", "map", "node2", 5_000, 62_000, 57_000, 510<<20),
		attempt("attempt_1700000000000_0001_m_000002_0", "map", "node2", 6_000, 61_000, 56_000, 505<<20),
		attempt("attempt_1700000000000_0001_m_000003_0", "map", "node1", 6_000, 300_000, 290_000, 900<<20),
		attempt("attempt_1700000000000_0001_r_000000_0", "reduce", "node2", 70_000, 90_000, 80_000, 700<<20),
	}
	j.AttemptList[4].State = "lost"
	// Maps 0 and 1 ended together, their CPU split by a guess.
	j.AttemptList[1].CPUDoubtMs, j.AttemptList[2].CPUDoubtMs = 1_200, 1_200
	// How they ended: map 1 failed and was retried, map 2 killed over its memory.
	code := func(v int32) *int32 { return &v }
	for i := range j.AttemptList {
		a := &j.AttemptList[i]
		a.Outcome, a.ExitCode, a.ExitSource = store.OutcomeSucceeded, code(0), store.ExitSourceNodeManager
	}
	j.AttemptList[2].Outcome, j.AttemptList[2].ExitCode, j.AttemptList[2].ExitSource = store.OutcomeFailed, code(1), store.ExitSourceTaskJVM
	j.AttemptList[3].Outcome, j.AttemptList[3].ExitCode = store.OutcomeKilledMemory, code(store.YarnKilledExceededPmem)
	j.AttemptList[4].Outcome, j.AttemptList[4].ExitCode, j.AttemptList[4].ExitSource = store.OutcomeLost, nil, ""
	retry := attempt("attempt_1700000000000_0001_m_000001_1", "map", "node1", 70_000, 58_000, 54_000, 500<<20)
	retry.Outcome, retry.ExitCode, retry.ExitSource, retry.RetryOf = store.OutcomeSucceeded, code(0), store.ExitSourceNodeManager, j.AttemptList[2].AttemptID
	copy := attempt("attempt_1700000000000_0001_m_000003_1", "map", "node2", 120_000, 50_000, 48_000, 500<<20)
	copy.Outcome, copy.ExitCode, copy.ExitSource, copy.RetryOf, copy.Speculative = store.OutcomeSucceeded, code(0), store.ExitSourceNodeManager, j.AttemptList[4].AttemptID, true
	j.AttemptList = append(j.AttemptList, retry, copy)
	r := &analysis.Report{JobID: j.JobID, State: j.State, Worst: analysis.Severe, Findings: []analysis.Finding{
		{Heuristic: "straggler", Severity: analysis.Severe, TaskType: "map", AttemptIDs: []string{"attempt_1700000000000_0001_m_000003_0"},
			Message: "1 of 4 map attempts take at least twice the median", Recommendation: "Split the input more evenly.",
			Numbers: []analysis.Number{{Name: "median_duration", Value: 61.5, Unit: "s"}, {Name: "worst_ratio", Value: 4.9, Unit: "ratio"}}},
		{Heuristic: "memory_headroom", Severity: analysis.Moderate, TaskType: "reduce", Message: "peaked at 34% of its 2048 MB container",
			Recommendation: "Smaller containers.", Parameter: "mapreduce.reduce.memory.mb", Value: "1024",
			Numbers: []analysis.Number{{Name: "peak_memory", Value: 700 << 20, Unit: "bytes"}, {Name: "used_share", Value: 34.2, Unit: "percent"}}},
		{Heuristic: "gc_pressure", Severity: analysis.None, Message: "fine"},
	}, Path: &analysis.Path{Start: t0, End: t0 + 400_000, Duration: 400, Steps: []analysis.Step{
		{AttemptID: "attempt_1700000000000_0001_m_000003_0", Type: "map", Host: "node1", Start: t0 + 6_000, End: t0 + 306_000, Wave: 1,
			Note: "300 s, CPU 97% of a core, outlier: more_work"},
		{AttemptID: "attempt_1700000000000_0001_r_000000_0", Type: "reduce", Host: "node\x1b2", Start: t0 + 70_000, End: t0 + 400_000, Wave: 1,
			Gap: -236, Shuffle: 236, Note: "90 s, CPU 89% of a core"}},
		Waves: []analysis.Waves{{TaskType: "map", Attempts: 4, Slots: 4, Waves: 1, LastWave: 4, LastWaveFill: 100, MedianDuration: 61.5, Kind: "full"}},
		WhatIf: []analysis.WhatIf{{Kind: "without_attempt", AttemptID: "attempt_1700000000000_0001_m_000003_0",
			Text: "Had attempt_1700000000000_0001_m_000003_0 taken the median 62 s of its type instead of 300 s, the job would have ended 238 s earlier."}}}}
	var b bytes.Buffer
	if err := Job(&b, j, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "\x1b") {
		t.Error("an escape sequence reached the terminal")
	}
	golden(t, "job", b.Bytes())
}

func TestAttempt(t *testing.T) {
	d := &store.AttemptDetail{Attempt: attempt("attempt_1700000000000_0001_m_000000_0", "map", "node1", 5_000, 60_000, 55_000, 500<<20)}
	d.ContainerID, d.Framework, d.Streaming, d.XmxBytes, d.JavaOpts = "container_1700000000000_0001_01_000002", "mapreduce", true, 820<<20, "-Xmx820m"
	code := int32(store.YarnKilledExceededPmem)
	d.Outcome, d.ExitCode, d.ExitSource, d.RetryOf = store.OutcomeKilledMemory, &code, store.ExitSourceNodeManager, "attempt_1700000000000_0001_m_000000_9"
	d.CPUDoubtMs = 1_200 // its CPU split from others' by a guess
	d.ExitDiagnostics = "Container [pid=4242,containerID=container_1700000000000_0001_01_000002] is running 1B beyond the 'PHYSICAL' memory limit.\n" +
		"Dump of the process-tree: |- 4243 java \x1b[2J\nContainer killed on request. Exit code is 143\n"
	proc := func(key store.Key, pid, ppid int32, role, cmd string, start, end int64, cpu, rss int64) store.Process {
		return store.Process{Key: key, Host: "node1", PID: pid, PPID: ppid, Role: role, Cmdline: cmd, Start: t0 + store.Time(start),
			End: t0 + store.Time(end), CPUMs: cpu, PeakRSS: rss, MaxThreads: 1}
	}
	d.ProcessList = []store.Process{
		proc(3, 102, 101, "streaming", "python3 mapper.py <script>alert(1)</script> \\xff\x07", 7_000, 64_000, 30_000, 60<<20),
		proc(1, 100, 1, "wrapper", "/bin/bash -c java ...", 5_000, 65_000, 10, 3<<20),
		proc(2, 101, 100, "task-jvm", "java -Xmx820m org.apache.hadoop.mapred.YarnChild 10.0.0.1 4011", 5_000, 65_000, 25_000, 400<<20),
		proc(4, 110, 102, "streaming-child", "sort -k1", 20_000, 20_500, 400, 2<<20),
	}
	d.ProcessList[2].MaxThreads, d.ProcessList[2].PeakPSS, d.ProcessList[0].ChildCPUMs = 40, 350<<20, 400
	d.Events = []store.Event{{Time: t0 + 5_000, Kind: "process_start", PID: 100, Message: "wrapper"},
		{Time: t0 + 66_000, Kind: "orphan", PID: 102, Message: "still running: python3 \x1b]0;title\x07"}}
	var b bytes.Buffer
	if err := Attempt(&b, d); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(b.String(), "\x1b\x07") {
		t.Error("a control character reached the terminal")
	}
	golden(t, "attempt", b.Bytes())
}

func TestUnits(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Bytes(512), "512 B"}, {Bytes(3 << 20), "3.0 MiB"}, {Bytes(5 << 30), "5.00 GiB"},
		{Duration(850), "850ms"}, {Duration(12_345), "12.3s"}, {Duration(245_000), "4m05s"}, {Duration(7_380_000), "2h03m"},
		{Unit(34.2, "percent"), "34%"}, {Unit(1<<30, "bytes"), "1.00 GiB"}, {Unit(61.5, "s"), "1m01s"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestHistory(t *testing.T) {
	h := &analysis.History{Name: "daily-etl <date>", User: "alice", Queue: "etl", JobID: "job_1700000000000_0003", Baseline: 2,
		Median: []analysis.Band{{Measure: "duration", Unit: "s", Median: 1200, Limit: 1500}, {Measure: "peak_memory", Unit: "bytes", Median: 1 << 30, Limit: 1.25 * (1 << 30)}},
		Runs: []analysis.Run{
			{JobID: "job_1700000000000_0001", Start: t0 - 2*86_400_000, Duration: 1180, CPU: 3600, PeakRSS: 1 << 30, GCShare: 3, IO: 5 << 30, Outside: []string{}},
			{JobID: "job_1700000000000_0002", Start: t0 - 86_400_000, Duration: 1220, CPU: 3700, PeakRSS: 1 << 30, GCShare: 3.2, IO: 5 << 30, Outside: []string{}},
			{JobID: "job_1700000000000_0003", Start: t0, Duration: 1900, CPU: 3650, PeakRSS: 1 << 30, GCShare: 2.9, IO: 5 << 30, Outside: []string{"duration"}}}}
	var b bytes.Buffer
	if err := History(&b, h); err != nil {
		t.Fatal(err)
	}
	golden(t, "history", b.Bytes())
}

func TestWaste(t *testing.T) {
	c := analysis.Cost{Attempts: 7, CPUHours: 0.16, UsedCPUHours: 0.08, MemGBHours: 0.16, UsedMemGBHours: 0.08,
		Failed: analysis.Waste{Attempts: 1, CPUHours: 0.03, MemGBHours: 0.03}, Speculative: analysis.Waste{Attempts: 1, CPUHours: 0.01, MemGBHours: 0.01},
		OverAllocated: analysis.Waste{Attempts: 4, CPUHours: 0.05, MemGBHours: 0.05}, WastedShare: 25}
	r := &analysis.WasteReport{By: "user", From: t0 - 86_400_000, To: t0, Jobs: 3, Total: c,
		Groups: []analysis.WasteGroup{{Key: "alice", Jobs: 2, Cost: c}, {Key: "bob\x1b", Jobs: 1, Cost: analysis.Cost{Attempts: 1, CPUHours: 0.01}}}}
	var b bytes.Buffer
	if err := Waste(&b, r); err != nil {
		t.Fatal(err)
	}
	golden(t, "waste", b.Bytes())
}
