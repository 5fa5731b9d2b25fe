package store

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/taskscope/taskscope/internal/wire"
)

func TestAttemptContribution(t *testing.T) {
	sum := AttemptSummary{FirstMs: 1500, LastMs: 3_601_000, CPUMs: 700, PeakRSS: 900, RSSByteMs: 1e9}
	for _, c := range []struct {
		name string
		m    wire.Attempt
		host string
		want Contribution
	}{
		{"no job: counted nowhere", wire.Attempt{AttemptID: "a"}, "h", Contribution{}},
		{"running", wire.Attempt{JobID: "j", Type: "map", FirstMs: 1000, MemoryMB: 1024}, "h",
			Contribution{In: true, Running: true, CPUMs: 700, PeakRSS: 900, First: 1000, Last: 3_601_000,
				MemMBms: 1024 * 3_600_000, RSSByteMs: 1e9, Host: "h", Type: "map"}},
		{"ended, no type, no memory said", wire.Attempt{JobID: "j", Ended: true, LastMs: 4_000_000}, "",
			Contribution{In: true, CPUMs: 700, PeakRSS: 900, First: 1500, Last: 4_000_000, RSSByteMs: 1e9, Type: "unknown"}},
	} {
		if got := AttemptContribution(&c.m, c.host, &sum); got != c.want {
			t.Errorf("%s:\n got  %+v\n want %+v", c.name, got, c.want)
		}
	}
}

func contributions() []Contribution {
	return []Contribution{
		{In: true, Running: true, CPUMs: 100, PeakRSS: 50, First: 2000, Last: 9000, MemMBms: 10, RSSByteMs: 4, Host: "h1", Type: "map"},
		{In: true, CPUMs: 300, PeakRSS: 80, First: 1000, Last: 5000, MemMBms: 20, RSSByteMs: 8, Host: "h2", Type: "map"},
		{In: true, Running: true, CPUMs: 50, PeakRSS: 20, First: 3000, Last: 12000, MemMBms: 5, RSSByteMs: 1, Host: "h1", Type: "reduce"},
		{In: true, CPUMs: 7, First: 0, Last: 0, Type: "unknown"}, // described, no sample yet
		{}, // an attempt of no job
	}
}

// Attempts add up into their job whatever their order: servers that take
// a job's attempts at once, from different agents, fold what they read.
func TestJobTotalsAddInAnyOrder(t *testing.T) {
	cs := contributions()
	want := JobTotals{Attempts: 4, Running: 2, CPUMs: 457, PeakRSS: 80, First: 1000, Last: 12000, MemMBms: 35,
		RSSByteMs: 13, Hosts: map[string]int{"h1": 2, "h2": 1}, ByType: map[string]int{"map": 2, "reduce": 1, "unknown": 1}}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		r.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
		var j JobTotals
		for _, c := range cs {
			j.Add(c)
		}
		if !reflect.DeepEqual(j, want) {
			t.Fatalf("in order %v:\n got  %+v\n want %+v", cs, j, want)
		}
	}
}

// A store that keeps a job's totals replaces each attempt's contribution
// as its batches come; the totals are then those of the attempts' last
// contributions added up (an attempt's peak and first sighting only move
// on, as batches come).
func TestJobTotalsApply(t *testing.T) {
	cs := contributions()
	var kept JobTotals
	for _, c := range cs {
		kept.Add(c)
	}
	now := make([]Contribution, len(cs))
	copy(now, cs)
	// The first attempt ends, on with more CPU; the second moves host and
	// type (a description that corrected them); the last joins the job.
	now[0].Running, now[0].CPUMs, now[0].Last, now[0].PeakRSS = false, 180, 10000, 60
	now[1].Host, now[1].Type = "h3", "reduce"
	now[4] = Contribution{In: true, Running: true, CPUMs: 1, First: 11000, Last: 11000, Host: "h2", Type: "map"}
	for i := range cs {
		if now[i] != cs[i] {
			kept.Apply(cs[i], now[i])
		}
	}
	var fresh JobTotals
	for _, c := range now {
		fresh.Add(c)
	}
	if !reflect.DeepEqual(kept, fresh) {
		t.Errorf("applied:\n %+v\nadded from the start:\n %+v", kept, fresh)
	}
	// Taking an attempt out leaves no host or type counted at zero.
	kept.Apply(now[1], Contribution{})
	if _, ok := kept.Hosts["h3"]; ok || kept.ByType["reduce"] != 1 || kept.Attempts != 4 {
		t.Errorf("after taking an attempt out: %+v", kept)
	}
}

func TestJobTotalsDescribe(t *testing.T) {
	var j JobTotals
	for _, m := range []wire.Attempt{
		{AttemptID: "a0", LastMs: 1, Framework: "unknown"},
		{AttemptID: "a1", LastMs: 2, AppID: "application_1", JobName: "wc", User: "alice", Queue: "q", Framework: "mapreduce"},
		{AttemptID: "a2", LastMs: 3, Framework: "unknown", User: ""}, // says nothing new
		{AttemptID: "a3", LastMs: 4, Queue: "q2"},
	} {
		j.Describe(&m)
	}
	if j.AppID != "application_1" || j.Name != "wc" || j.User != "alice" || j.Queue != "q2" || j.Framework != "mapreduce" {
		t.Errorf("described: %+v", j)
	}
}

// Each descriptive field of a job is what the latest description saying it
// says (by last sighting, then attempt id), in whatever order descriptions
// come: servers fed the same batches in other orders answer alike.
func TestJobTotalsDescribeInAnyOrder(t *testing.T) {
	descs := []wire.Attempt{
		{AttemptID: "m_0", LastMs: 5000, Framework: "unknown", Queue: "default"},
		{AttemptID: "m_1", LastMs: 9000, Framework: "tez", JobName: "dag one", User: "ann", Queue: "etl"},
		{AttemptID: "m_2", LastMs: 9000, Framework: "tez", JobName: "dag two"}, // tie: the larger attempt id
		{AttemptID: "m_3", LastMs: 12000, Queue: "adhoc", AppID: "application_7"},
		{AttemptID: "m_4", LastMs: 20000, Framework: "unknown", User: ""},
		{AttemptID: "m_5", LastMs: 3000, User: "bob", AppID: "application_6"},
	}
	want := JobTotals{AppID: "application_7", Framework: "tez", Name: "dag two", User: "ann", Queue: "adhoc"}
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		r.Shuffle(len(descs), func(i, j int) { descs[i], descs[j] = descs[j], descs[i] })
		var j JobTotals
		for _, m := range descs {
			j.Describe(&m)
		}
		if j.AppID != want.AppID || j.Framework != want.Framework || j.Name != want.Name || j.User != want.User ||
			j.Queue != want.Queue {
			order := make([]string, len(descs))
			for i, m := range descs {
				order[i] = m.AttemptID
			}
			t.Fatalf("in order %v: %+v, want %+v", order, j, want)
		}
	}
	var j JobTotals
	j.Describe(&wire.Attempt{AttemptID: "x", LastMs: 1, Framework: "unknown"})
	if j.Framework != "unknown" {
		t.Errorf("framework %q where only unknown was said", j.Framework)
	}
}

func TestJobTotalsJob(t *testing.T) {
	j := JobTotals{Name: "wc", Attempts: 2, Running: 1, First: 1000, Last: 9000, CPUMs: 5, PeakRSS: 7,
		MemMBms: 1024 * 3_600_000, RSSByteMs: (1 << 30) * 3_600_000 / 2, Hosts: map[string]int{"h": 2},
		ByType: map[string]int{"map": 2}}
	got := j.Job("job_1", 8000)
	want := Job{JobID: "job_1", Framework: "unknown", Name: "wc", State: StateRunning, Start: 1000, LastSeen: 9000,
		Attempts: 2, Running: 1, ByType: map[string]int{"map": 2}, Hosts: 1, CPUMs: 5, PeakRSS: 7, MemGBHours: 1,
		UsedGBHours: 0.5}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("running:\n got  %+v\n want %+v", got, want)
	}
	if got := j.Job("job_1", 9001); got.State != StateFinished || got.End != 9000 {
		t.Errorf("stale: %s, end %d", got.State, got.End)
	}
	var back JobTotals
	back.SetGBHours(got.MemGBHours, got.UsedGBHours)
	if back.MemMBms != j.MemMBms || back.RSSByteMs != j.RSSByteMs {
		t.Errorf("GB-hours back to sums: %g %g, want %g %g", back.MemMBms, back.RSSByteMs, j.MemMBms, j.RSSByteMs)
	}
}
