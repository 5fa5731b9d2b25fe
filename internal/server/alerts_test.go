package server

import (
	"strings"
	"testing"

	"github.com/taskscope/taskscope/internal/alert"
	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store"
)

// What the alerter is told of a job's analysis: each finding on the host
// of its attempts when they share one; lost and orphaned processes by
// host and kind, at their finding's severity, while some were not reaped.
func TestAlertJob(t *testing.T) {
	j := analysedJob{ID: "job_1", Name: "nightly", User: "alice", Queue: "etl",
		Hosts: map[string]string{"a1": "h1", "a2": "h1", "a3": "h2"},
		Findings: []analysis.Finding{
			{Heuristic: "gc_pressure", Severity: analysis.Severe, TaskType: "map", AttemptIDs: []string{"a1", "a2"},
				Message: "map JVMs spent 23% of their time in GC. More.", Recommendation: "Give the heap more room.", Parameter: "mapreduce.map.java.opts", Value: "-Xmx1g"},
			{Heuristic: "straggler", Severity: analysis.Moderate, AttemptIDs: []string{"a1", "a3"}, Message: "slow"},
			{Heuristic: "cpu_efficiency", Severity: analysis.None, Message: "fine"},
			{Heuristic: "lost_processes", Severity: analysis.Severe, Cause: "lost_jvm", AttemptIDs: []string{"a3"},
				Message: "2 task processes lost. For instance: still running: python3 -c 'token=hunter2'"},
			{Heuristic: "lost_processes", Severity: analysis.Moderate, Cause: "orphan"},
		}}
	events := []store.Event{
		{Kind: "lost_jvm", Host: "h2", PID: 10}, {Kind: "lost_jvm", Host: "h2", PID: 11}, {Kind: "lost_jvm", Host: "h3", PID: 10},
		{Kind: "orphan", Host: "h1", PID: 20}, {Kind: "reap", Host: "h1", PID: 20}, // the orphan was ended
		{Kind: "attempt_start", Host: "h1", PID: 30},
	}
	got := alertJob(j, events)
	if got.ID != "job_1" || got.User != "alice" || got.Queue != "etl" || got.Ended {
		t.Errorf("job %+v", got)
	}
	want := []struct {
		name, heuristic, host string
		sev                   analysis.Severity
	}{
		{alert.AlertFinding, "gc_pressure", "h1", analysis.Severe},
		{alert.AlertFinding, "straggler", "", analysis.Moderate},
		{alert.AlertLostTaskJVM, "lost_processes", "h2", analysis.Severe},
		{alert.AlertLostTaskJVM, "lost_processes", "h3", analysis.Severe},
	}
	if len(got.Findings) != len(want) {
		t.Fatalf("%d findings, want %d: %+v", len(got.Findings), len(want), got.Findings)
	}
	for i, w := range want {
		f := got.Findings[i]
		if f.Alert != w.name || f.Heuristic != w.heuristic || f.Host != w.host || f.Severity != w.sev || f.Summary == "" {
			t.Errorf("finding %d: %+v, want %+v", i, f, w)
		}
	}
	if s := got.Findings[0].Summary; s != "severe gc_pressure (map) of job_1 (nightly): map JVMs spent 23% of their time in GC." {
		t.Errorf("summary %q", s)
	}
	if d := got.Findings[0].Description; d != "map JVMs spent 23% of their time in GC. More.\nGive the heap more room. (mapreduce.map.java.opts=-Xmx1g)" {
		t.Errorf("description %q", d)
	}
	for _, f := range got.Findings {
		if strings.Contains(f.Summary+f.Description, "python3") {
			t.Errorf("a command line from an event's message in alert %+v", f)
		}
	}
	if s := got.Findings[2].Summary; s != "2 task processes of job_1 (nightly) on h2 lost by their TaskTracker (Child JVMs beyond the slots, or that never got their task) (pids 10 11)" {
		t.Errorf("lost summary %q", s)
	}
}
