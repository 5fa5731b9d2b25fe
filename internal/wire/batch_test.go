package wire

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"testing"
)

const exampleKey = 0x828a323a3a6e26fa

const (
	exHost    = "worker7.example.com"
	exAttempt = "attempt_1700000000000_0042_m_000003_0"
	exJob     = "job_1700000000000_0042"
	exApp     = "application_1700000000000_0042"
	exCont    = "container_e07_1700000000000_0042_01_000005"
	t0        = int64(1700000000000)
)

// fullBatch sets every field of every message, negative values included.
func fullBatch() *Batch {
	jvm := ProcessKey(exHost, 4243, t0+1500)
	sh := ProcessKey(exHost, 4242, t0+1000)
	return &Batch{
		Version: Version, AgentID: "agent-worker7", Seq: 42, Host: exHost, SentMs: t0 + 65000,
		Metrics: []string{CPUUserMs, RSSBytes, ReadBytes},
		Processes: []Process{
			{Key: sh, PID: 4242, PPID: 4200, SID: 4242, StartMs: t0 + 1000, EndMs: t0 + 64000, Cmdline: "/bin/bash -c /usr/lib/jvm/bin/java ... YarnChild",
				Comm: "bash", Role: RoleWrapper, UID: 1003, User: "alice"},
			{Key: jvm, PID: 4243, PPID: 4242, SID: 4242, StartMs: t0 + 1500, Cmdline: "/usr/lib/jvm/bin/java -Xmx820m org.apache.hadoop.mapred.YarnChild 10.1.2.3 39417 " + exAttempt + " 5",
				Comm: "java", Role: RoleTaskJVM, UID: 1003, User: "alice"},
		},
		Attempts: []Attempt{{AttemptID: exAttempt, JobID: exJob, AppID: exApp, ContainerID: exCont, Type: "map", Framework: "mapreduce",
			FirstMs: t0 + 1000, LastMs: t0 + 64000, Ended: true, JobName: "word count – ünïcode", User: "alice", Queue: "etl",
			MemoryMB: 1024, JavaOpts: "-Xmx820m", XmxBytes: 820 << 20, Streaming: true,
			JVMExit: ExitStatus{Status: 0, Ms: t0 + 63900}, RootExit: ExitStatus{Status: 137 << 8, Ms: t0 + 64000},
			FileExit: ExitStatus{Status: 137, Ms: t0 + 64100}, NMExit: ExitStatus{Status: -104, Ms: t0 + 65000},
			ExitDiagnostics: "Container killed on request. Exit code is 137", OOMKills: 1,
			TaskLog: ExitStatus{Status: 0, Ms: t0 + 64050}, CPUDoubtMs: 40}},
		Members: []Membership{
			{Process: sh, AttemptID: exAttempt, FromMs: t0 + 1000, ToMs: t0 + 64000, Role: RoleWrapper},
			{Process: jvm, AttemptID: exAttempt, FromMs: t0 + 1500, CPUBaseMs: 120, Role: RoleTaskJVM},
		},
		ProcSeries: []Series{{Key: jvm, AttemptID: exAttempt, Times: []int64{t0 + 2000, t0 + 3000, t0 + 4000},
			Columns: []Column{
				{Metric: 0, Values: []int64{150, 900, 1850}},
				{Metric: 1, Values: []int64{400 << 20, 0, 380 << 20}, Absent: []byte{0b010}},
			}}},
		AttemptSeries: []Series{{AttemptID: exAttempt, Times: []int64{t0 + 2000, t0 + 4000},
			Columns: []Column{{Metric: 2, Values: []int64{1 << 30, 3 << 30}}}}},
		Events: []Event{{Ms: t0 + 64000, Kind: EventProcessExit, Process: sh, PID: 4242, AttemptID: exAttempt, JobID: exJob,
			Message: "exited with status 143", Value: -15}},
		Stats: AgentStats{DroppedSamples: 1, DroppedBatches: 2, SpoolBytes: 3, Ticks: 65, Overruns: 4, ReadErrors: 5},
		Profiles: []Profile{exampleProfile(jvm), {ID: "p-2", AttemptID: exAttempt, Process: jvm, PID: 4243, StartMs: t0 + 3000,
			EndMs: t0 + 3000, Status: ProfileFailed, Error: "pid 4243: the process exited"}},
	}
}

// exampleProfile is a profile of two dumps of the JVM jvm.
func exampleProfile(jvm uint64) Profile {
	return Profile{ID: "p-1", AttemptID: exAttempt, Process: jvm, PID: 4243, StartMs: t0 + 2000, EndMs: t0 + 32000,
		IntervalMs: 200, Dumps: 150, PausedUs: 450000, MaxPauseUs: 9000, Status: ProfilePartial, Error: "pause budget spent",
		Strings: []string{"main", "org.apache.hadoop.mapred.YarnChild.main", "Work.spin", "GC Thread#N", "fetcher#N", "sun.nio.ch.read"},
		Stacks: []ProfileStack{
			{Thread: 0, State: ThreadRunnable, Frames: []uint32{1, 2}, CPUNs: 25e9, WaitNs: 1e9, Samples: 140, QueuedNs: 2e9},
			{Thread: 3, State: ThreadVM, CPUNs: 3e9, Samples: 150},
			{Thread: 4, State: ThreadRunnable, Frames: []uint32{5}, WaitNs: 29e9, Samples: 150},
		},
		DroppedSamples: 7}
}

// minimalBatch is the smallest valid batch.
func minimalBatch() *Batch {
	return &Batch{Version: Version, AgentID: "a", Seq: 1, Host: "h"}
}

// exampleBatch is the worked example of docs/wire.md.
func exampleBatch() *Batch {
	jvm := ProcessKey("w7", 4243, t0)
	return &Batch{
		Version: 1, AgentID: "w7-agent", Seq: 1, Host: "w7", SentMs: t0 + 3000,
		Metrics:   []string{CPUUserMs, RSSBytes},
		Processes: []Process{{Key: jvm, PID: 4243, PPID: 4242, StartMs: t0, Comm: "java", Role: RoleTaskJVM}},
		Attempts:  []Attempt{{AttemptID: "attempt_1700000000000_0042_m_000003_0", JobID: "job_1700000000000_0042", Type: "map", Framework: "mapreduce", FirstMs: t0}},
		Members:   []Membership{{Process: jvm, AttemptID: "attempt_1700000000000_0042_m_000003_0", FromMs: t0}},
		ProcSeries: []Series{{Key: jvm, Times: []int64{t0 + 1000, t0 + 2000, t0 + 3000}, Columns: []Column{
			{Metric: 0, Values: []int64{120, 250, 250}},
			{Metric: 1, Values: []int64{300 << 20, 0, 290 << 20}, Absent: []byte{0x02}},
		}}},
		Stats: AgentStats{Ticks: 3},
	}
}

// realisticBatch is what an agent sends from a busy node: nproc processes
// in a few attempts, samples of the 25 well-known metrics each.
func realisticBatch(nproc, samples int) *Batch {
	b := &Batch{Version: Version, AgentID: "agent-worker7", Seq: 9001, Host: exHost, SentMs: t0 + int64(samples)*1000}
	for _, m := range ProcessMetrics {
		b.Metrics = append(b.Metrics, m.Name)
	}
	seed := uint64(1)
	rnd := func(n int64) int64 { seed = seed*6364136223846793005 + 1442695040888963407; return int64(seed>>33) % n }
	for p := 0; p < nproc; p++ {
		pid := int32(10000 + p*7)
		key := ProcessKey(exHost, pid, t0-int64(p)*1000)
		attempt := "attempt_1700000000000_0042_m_" + pad6(p/5) + "_0"
		b.Processes = append(b.Processes, Process{Key: key, PID: pid, PPID: pid - 1, SID: pid - 1, StartMs: t0 - int64(p)*1000,
			Cmdline: "/usr/lib/jvm/java-8-openjdk-amd64/bin/java -Xmx820m -Djava.io.tmpdir=/data/yarn/local/tmp org.apache.hadoop.mapred.YarnChild 10.1.2.3 39417 " + attempt + " 5",
			Comm:    "java", Role: RoleTaskJVM, UID: 1003, User: "alice"})
		if p%5 == 0 {
			b.Attempts = append(b.Attempts, Attempt{AttemptID: attempt, JobID: exJob, AppID: exApp, ContainerID: exCont, Type: "map",
				Framework: "mapreduce", FirstMs: t0, LastMs: t0 + int64(samples)*1000, MemoryMB: 1024, JavaOpts: "-Xmx820m", XmxBytes: 820 << 20})
		}
		b.Members = append(b.Members, Membership{Process: key, AttemptID: attempt, FromMs: t0, Role: RoleTaskJVM})
		s := Series{Key: key}
		for i := 0; i < samples; i++ {
			s.Times = append(s.Times, t0+int64(i)*1000+rnd(20))
		}
		for m, info := range ProcessMetrics {
			c := Column{Metric: uint32(m)}
			v := rnd(1 << 30)
			for i := 0; i < samples; i++ {
				if info.Cumulative {
					v += rnd(2000)
				} else {
					v += rnd(1<<20) - 1<<19
				}
				if info.Name == PSSBytes && i%5 != 0 { // read less often
					c.Values = append(c.Values, 0)
					if c.Absent == nil {
						c.Absent = make([]byte, (samples+7)/8)
					}
					c.Absent[i/8] |= 1 << (i % 8)
					continue
				}
				c.Values = append(c.Values, v)
			}
			s.Columns = append(s.Columns, c)
		}
		b.ProcSeries = append(b.ProcSeries, s)
	}
	b.Events = append(b.Events, Event{Ms: t0 + 500, Kind: EventProcessStart, Process: b.Processes[0].Key, PID: b.Processes[0].PID})
	b.Stats = AgentStats{Ticks: uint64(samples)}
	return b
}

func pad6(n int) string {
	s := []byte("000000")
	for i := 5; i >= 0 && n > 0; i-- {
		s[i] = byte('0' + n%10)
		n /= 10
	}
	return string(s)
}

func TestExampleBatchesAreValid(t *testing.T) {
	for name, b := range map[string]*Batch{"full": fullBatch(), "minimal": minimalBatch(), "example": exampleBatch(), "realistic": realisticBatch(50, 10)} {
		if err := Validate(b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestIsAbsent(t *testing.T) {
	c := Column{Values: make([]int64, 10), Absent: []byte{0b1000_0010, 0b01}}
	for i, want := range []bool{false, true, false, false, false, false, false, true, true, false, false, false} {
		if got := c.IsAbsent(i); got != want {
			t.Errorf("IsAbsent(%d) = %v, want %v", i, got, want)
		}
	}
	if (&Column{}).IsAbsent(0) {
		t.Error("a nil bitmap says absent")
	}
}

func TestSampleCount(t *testing.T) {
	if n := realisticBatch(50, 10).SampleCount(); n != 500 {
		t.Errorf("SampleCount = %d, want 500", n)
	}
	if n := minimalBatch().SampleCount(); n != 0 {
		t.Errorf("SampleCount = %d, want 0", n)
	}
}

func TestProcessKey(t *testing.T) {
	k := ProcessKey("worker7", 4242, t0)
	if k == 0 || k != ProcessKey("worker7", 4242, t0) {
		t.Fatal("ProcessKey is zero or unstable")
	}
	// As docs/wire.md says: FNV-1a 64 of host, a 0 byte, the pid as a 64-bit
	// little-endian number (of its 32 bits), the start as one.
	for _, c := range []struct {
		host  string
		pid   int32
		start int64
	}{{"w7", 4243, t0}, {"", -1, -1}, {exHost, 1 << 30, 0}} {
		h := fnv.New64a()
		h.Write([]byte(c.host))
		h.Write([]byte{0})
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(uint32(c.pid))))
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(c.start)))
		if got, want := ProcessKey(c.host, c.pid, c.start), h.Sum64(); got != want {
			t.Errorf("ProcessKey(%q, %d, %d) = %#x, want %#x", c.host, c.pid, c.start, got, want)
		}
	}
	// The value of the worked example in docs/wire.md.
	if got, want := ProcessKey("w7", 4243, 1700000000000), uint64(exampleKey); got != want {
		t.Errorf("ProcessKey(w7, 4243, 1700000000000) = %#x, want %#x", got, want)
	}
	seen := map[uint64]string{}
	for _, host := range []string{"worker7", "worker8", "worker7x", ""} {
		for _, pid := range []int32{1, 4242, 4243, -1} {
			for _, start := range []int64{t0, t0 + 1, 0, -1} {
				k := ProcessKey(host, pid, start)
				id := fmt.Sprint(host, "/", pid, "/", start)
				if other, ok := seen[k]; ok {
					t.Errorf("ProcessKey collision: %q and %q", id, other)
				}
				seen[k] = id
			}
		}
	}
}
