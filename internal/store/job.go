package store

import (
	"encoding/json"
	"maps"

	"github.com/taskscope/taskscope/internal/wire"
)

// Contribution is what one attempt adds to its job's figures (JobTotals),
// made from its description and summary by AttemptContribution. The zero
// value adds nothing.
type Contribution struct {
	In        bool // counted in a job at all (it has a job id)
	Running   bool // not ended
	CPUMs     int64
	PeakRSS   int64
	First     int64
	Last      int64
	MemMBms   float64 // allocated memory over its span, MB × ms
	RSSByteMs float64 // used memory: its RSS integral
	Host      string
	Type      string // "unknown" when not said
}

// AttemptContribution is what the attempt of description m, on host, with
// summary s adds to its job.
func AttemptContribution(m *wire.Attempt, host string, s *AttemptSummary) Contribution {
	if m.JobID == "" {
		return Contribution{}
	}
	first, last := AttemptSpan(m, s)
	c := Contribution{In: true, Running: !m.Ended, CPUMs: s.CPUMs, PeakRSS: s.PeakRSS, First: first, Last: last,
		RSSByteMs: s.RSSByteMs, Host: host, Type: m.Type}
	if c.Type == "" {
		c.Type = "unknown"
	}
	if m.MemoryMB > 0 && first > 0 && last > first {
		c.MemMBms = float64(m.MemoryMB) * float64(last-first)
	}
	return c
}

// JobTotals is a job's figures as sums over its attempts: what their
// descriptions say of the job (Describe), and their contributions. A store
// that keeps it replaces an attempt's old contribution by its new one as
// batches come (Apply); one that keeps none adds up the contributions of
// the job's attempts when it reads it (Add, in any order). Job turns it
// into what the API returns.
type JobTotals struct {
	AppID, Framework, Name, User, Queue string
	Attempts, Running                   int
	CPUMs, PeakRSS                      int64 // PeakRSS: the largest attempt peak
	First, Last                         int64
	MemMBms, RSSByteMs                  float64
	Hosts                               map[string]int // attempts by host
	ByType                              map[string]int // attempts by type
	said                                [5]sayer       // who said AppID, Framework, Name, User, Queue
}

// sayer is the description that said one of a job's descriptive fields:
// its attempt's last sighting then, and the attempt.
type sayer struct {
	ms      int64
	attempt string
}

// after tells whether a description of s is later than one of o (ties by
// attempt id, so that every order of the same descriptions gives one
// answer).
func (s sayer) after(o sayer) bool {
	if s.ms != o.ms {
		return s.ms > o.ms
	}
	return s.attempt > o.attempt
}

// Clone is a copy of j that changes to it leave j as it is.
func (j *JobTotals) Clone() JobTotals {
	c := *j
	c.Hosts, c.ByType = maps.Clone(j.Hosts), maps.Clone(j.ByType)
	return c
}

// Describe takes what an attempt's description says of its job. Each of
// the job's application id, framework, name, user and queue is what the
// latest description that says it says (latest by the attempt's last
// sighting, then by attempt id), whatever order descriptions come in: the
// attempts of one job normally agree, but a Tez session runs DAGs of
// several names, and two stores fed the same batches in other orders must
// answer alike. A framework of "unknown" is taken only while none is known.
func (j *JobTotals) Describe(m *wire.Attempt) {
	by := sayer{m.LastMs, m.AttemptID}
	set := func(i int, dst *string, v string) {
		if v != "" && (*dst == "" || by.after(j.said[i])) {
			*dst, j.said[i] = v, by
		}
	}
	set(0, &j.AppID, m.AppID)
	switch {
	case m.Framework != "unknown":
		if j.Framework == "unknown" {
			j.Framework = "" // its sayer is none: any known framework replaces it
		}
		set(1, &j.Framework, m.Framework)
	case j.Framework == "":
		j.Framework = m.Framework
	}
	set(2, &j.Name, m.JobName)
	set(3, &j.User, m.User)
	set(4, &j.Queue, m.Queue)
}

// Add adds an attempt's contribution.
func (j *JobTotals) Add(c Contribution) { j.Apply(Contribution{}, c) }

// Apply replaces old, an attempt's contribution counted before (zero: none),
// by now. Sums and counts take old's share off; the peak and the first
// sighting, which cannot, stay where old took them (an attempt's peak and
// first sighting do not move back).
func (j *JobTotals) Apply(old, now Contribution) {
	if old.In {
		j.Attempts--
		if old.Running {
			j.Running--
		}
		j.CPUMs -= old.CPUMs
		j.MemMBms -= old.MemMBms
		j.RSSByteMs -= old.RSSByteMs
		if old.Host != "" {
			if j.Hosts[old.Host]--; j.Hosts[old.Host] <= 0 {
				delete(j.Hosts, old.Host)
			}
		}
		if j.ByType[old.Type]--; j.ByType[old.Type] <= 0 {
			delete(j.ByType, old.Type)
		}
	}
	if now.In {
		j.Attempts++
		if now.Running {
			j.Running++
		}
		j.CPUMs += now.CPUMs
		j.MemMBms += now.MemMBms
		j.RSSByteMs += now.RSSByteMs
		j.PeakRSS = max(j.PeakRSS, now.PeakRSS)
		if now.First > 0 && (j.First == 0 || now.First < j.First) {
			j.First = now.First
		}
		j.Last = max(j.Last, now.Last)
		if now.Host != "" {
			if j.Hosts == nil {
				j.Hosts = map[string]int{}
			}
			j.Hosts[now.Host]++
		}
		if j.ByType == nil {
			j.ByType = map[string]int{}
		}
		j.ByType[now.Type]++
	}
}

// MemGBHours is the memory its attempts were allocated, in GB-hours.
func (j *JobTotals) MemGBHours() float64 { return j.MemMBms / 1024 / 3600_000 }

// UsedGBHours is the memory its attempts used (RSS over time), in GB-hours.
func (j *JobTotals) UsedGBHours() float64 { return j.RSSByteMs / (1 << 30) / 3600_000 }

// SetGBHours sets the sums MemGBHours and UsedGBHours give (for a store
// that keeps them in GB-hours).
func (j *JobTotals) SetGBHours(mem, used float64) {
	j.MemMBms, j.RSSByteMs = mem*1024*3600_000, used*(1<<30)*3600_000
}

// Job is the job id as the API shows it, its state decided by staleBefore
// (Clock.StaleBefore). Its framework is "unknown" when no attempt said
// one. Its ByType is j's (not a copy).
func (j *JobTotals) Job(id string, staleBefore int64) Job {
	out := Job{JobID: id, AppID: j.AppID, Framework: j.Framework, Name: j.Name, User: j.User, Queue: j.Queue,
		Start: Time(j.First), LastSeen: Time(j.Last), Attempts: j.Attempts, Running: j.Running, ByType: j.ByType,
		Hosts: len(j.Hosts), CPUMs: j.CPUMs, PeakRSS: j.PeakRSS, MemGBHours: j.MemGBHours(), UsedGBHours: j.UsedGBHours()}
	if out.Framework == "" {
		out.Framework = "unknown"
	}
	out.State, out.End = JobState(j.Running, j.Last, staleBefore)
	return out
}

// FormatByType is a job's count of attempts by type as stores keep it in
// a column: JSON, "" for none. ParseByType reads it back.
func FormatByType(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// ParseByType reads what FormatByType wrote (an empty map for "").
func ParseByType(s string) map[string]int {
	m := map[string]int{}
	if s != "" {
		json.Unmarshal([]byte(s), &m)
	}
	return m
}
