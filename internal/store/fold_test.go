package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/taskscope/taskscope/internal/wire"
)

// recSink records what a fold gives its sink.
type recSink struct{ got []string }

func (s *recSink) Chunk(kind int, c *SeriesChunk, job string, start int64) {
	s.got = append(s.got, fmt.Sprintf("chunk %d %x %s %d", kind, c.Key, job, start))
}
func (s *recSink) Described(b *wire.Batch, i int, a *AttemptRecord[int]) {
	s.got = append(s.got, "described "+b.Attempts[i].AttemptID)
}
func (s *recSink) Member(b *wire.Batch, m *wire.Membership, a *AttemptRecord[int], first bool, idx int) {
	s.got = append(s.got, fmt.Sprintf("member %s %x first=%v", a.Meta.AttemptID, m.Process, first))
}
func (s *recSink) Process(b *wire.Batch, p *wire.Process, a *AttemptRecord[int], cmd bool, idx int) {
	id := "-"
	if a != nil {
		id = a.Meta.AttemptID
	}
	s.got = append(s.got, fmt.Sprintf("process %s %x cmd=%v", id, p.Key, cmd))
}
func (s *recSink) Event(b *wire.Batch, i int, job string) {
	s.got = append(s.got, "event "+b.Events[i].Kind+" "+job)
}
func (s *recSink) Ext(kind int, metric string) {
	s.got = append(s.got, fmt.Sprintf("ext %d %s", kind, metric))
}
func (s *recSink) Batch(p *Prepared) { s.got = append(s.got, fmt.Sprintf("batch %d", p.Batch.Seq)) }

// fakeStore is what a fold reads through its options: attempts, jobs'
// attempts, agents and processes' attempts, as a store would hold them.
type fakeStore struct {
	atts   map[string]*AttemptRecord[int]
	agents map[string]*AgentState
	procs  map[uint64][]string
	reads  []string
}

func (fs *fakeStore) options(shared, jobs bool) FoldOptions[int] {
	o := FoldOptions[int]{LoadAttempts: func(_ context.Context, ids []string, _ map[string]string) (map[string]*AttemptRecord[int], error) {
		fs.reads = append(fs.reads, fmt.Sprint("attempts ", ids))
		out := map[string]*AttemptRecord[int]{}
		for _, id := range ids {
			if a := fs.atts[id]; a != nil {
				cp := *a
				cp.ReadMembers()
				for _, k := range a.Members() {
					cp.AddMember(k)
				}
				out[id] = &cp
			}
		}
		return out, nil
	}}
	if jobs {
		o.LoadJobAttempts = func(_ context.Context, ids []string) ([]*AttemptRecord[int], error) {
			fs.reads = append(fs.reads, fmt.Sprint("jobs ", ids))
			var out []*AttemptRecord[int]
			for _, a := range fs.atts {
				if slices.Contains(ids, a.Meta.JobID) {
					out = append(out, a)
				}
			}
			return out, nil
		}
	}
	if shared {
		o.Shared = true
		o.LoadAgents = func(_ context.Context, ids []string) (map[string]*AgentState, error) {
			fs.reads = append(fs.reads, fmt.Sprint("agents ", ids))
			out := map[string]*AgentState{}
			for _, id := range ids {
				if a := fs.agents[id]; a != nil {
					cp := *a
					out[id] = &cp
				}
			}
			return out, nil
		}
		o.ProcessAttempts = func(_ context.Context, keys []uint64) (map[uint64][]string, error) {
			fs.reads = append(fs.reads, fmt.Sprint("processes ", len(keys)))
			out := map[uint64][]string{}
			for _, k := range keys {
				if ids := fs.procs[k]; ids != nil {
					out[k] = ids
				}
			}
			return out, nil
		}
	}
	return o
}

// commit folds batches in one transaction and commits it.
func commit(t *testing.T, f *Fold[int], ext *ExtNames, bs ...*wire.Batch) (*recSink, *FoldTx[int], []bool) {
	t.Helper()
	tx := f.Begin(1)
	var dups []bool
	for _, b := range bs {
		dup, err := tx.Append(context.Background(), Prepare(b))
		if err != nil {
			t.Fatal(err)
		}
		dups = append(dups, dup)
	}
	if err := tx.Recheck(context.Background()); err != nil {
		t.Fatal(err)
	}
	var s recSink
	if err := tx.Fold(context.Background(), &s, ext); err != nil {
		t.Fatal(err)
	}
	return &s, tx, dups
}

func foldBatch(agent string, seq uint64, atts []wire.Attempt, members []wire.Membership, procs []wire.Process) *wire.Batch {
	b := &wire.Batch{Version: wire.Version, AgentID: agent, Seq: seq, Host: "node1", SentMs: 1_000_000 + int64(seq)*5000,
		Attempts: atts, Members: members, Processes: procs}
	b.Metrics = []string{wire.AttemptCPUMs, "x_custom"}
	for _, a := range atts {
		b.AttemptSeries = append(b.AttemptSeries, wire.Series{AttemptID: a.AttemptID, Times: []int64{b.SentMs},
			Columns: []wire.Column{{Metric: 0, Values: []int64{int64(seq) * 100}}, {Metric: 1, Values: []int64{1}}}})
	}
	for _, p := range procs {
		b.ProcSeries = append(b.ProcSeries, wire.Series{Key: p.Key, Times: []int64{b.SentMs},
			Columns: []wire.Column{{Metric: 1, Values: []int64{7}}}})
	}
	return b
}

// TestFoldBatches: the fold of a sequence of commits gives its sink each
// process record in the rows of the attempts its process is a member of,
// a command line once per attempt and process, chunks under their jobs,
// new metrics' names once; a batch of a sequence stored is a duplicate;
// the jobs' figures follow their attempts.
func TestFoldBatches(t *testing.T) {
	fs := &fakeStore{}
	f := NewFold(fs.options(false, true))
	var ext ExtNames
	a1 := wire.Attempt{AttemptID: "attempt_1_1_m_000001_0", JobID: "job_1_1", FirstMs: 1_000_000, JobName: "wc", MemoryMB: 1024}
	jvm := wire.Process{Key: 0xa, PID: 10, StartMs: 1_000_000, Cmdline: "java YarnChild", Role: wire.RoleTaskJVM}
	s, tx, dups := commit(t, f, &ext, foldBatch("ag", 1, []wire.Attempt{a1},
		[]wire.Membership{{Process: 0xa, AttemptID: a1.AttemptID, FromMs: 1_000_000}}, []wire.Process{jvm}))
	want := []string{"described attempt_1_1_m_000001_0", "member attempt_1_1_m_000001_0 a first=true",
		"process attempt_1_1_m_000001_0 a cmd=true", "batch 1", "chunk 0 a job_1_1 1000000",
		"chunk 2 " + fmt.Sprintf("%x", ExtKey(0xa, "x_custom")) + " job_1_1 1000000", "ext 2 x_custom",
		"chunk 1 " + fmt.Sprintf("%x", AttemptKey(a1.AttemptID)) + " job_1_1 0",
		"chunk 3 " + fmt.Sprintf("%x", ExtKey(AttemptKey(a1.AttemptID), "x_custom")) + " job_1_1 0", "ext 3 x_custom"}
	slices.Sort(want)
	slices.Sort(s.got)
	if !slices.Equal(s.got, want) || dups[0] {
		t.Errorf("first commit:\n got  %q\n want %q (dups %v)", s.got, want, dups)
	}
	if d := tx.DirtyAttempts(); len(d) != 1 || d[0].Processes() != 1 || d[0].Sum.CPUMs != 100 {
		t.Errorf("dirty attempts %+v", d)
	}
	j := tx.DirtyJobs()["job_1_1"]
	if j == nil || j.Attempts != 1 || j.Running != 1 || j.Name != "wc" || j.CPUMs != 100 {
		t.Fatalf("job %+v", j)
	}
	f.Commit(tx, true, &ext)
	// The same batch again: a duplicate. A process record without a
	// membership goes to its attempt's rows, its command line not again;
	// another process of no attempt known to no attempt's.
	jvm.EndMs = 1_010_000
	other := wire.Process{Key: 0xb, PID: 11, StartMs: 1_000_000, Cmdline: "sleep 1"}
	s, tx, dups = commit(t, f, &ext, foldBatch("ag", 1, nil, nil, nil),
		foldBatch("ag", 2, []wire.Attempt{{AttemptID: a1.AttemptID, LastMs: 1_010_000, Ended: true}}, nil, []wire.Process{jvm, other}))
	want = []string{"described attempt_1_1_m_000001_0", "process attempt_1_1_m_000001_0 a cmd=false", "process - b cmd=true",
		// (a process that exited in the batch: its last chunks under its
		// job; one of no attempt known: under none)
		"batch 2", "chunk 0 a job_1_1 1000000", "chunk 0 b  1000000",
		"chunk 2 " + fmt.Sprintf("%x", ExtKey(0xa, "x_custom")) + " job_1_1 1000000",
		"chunk 2 " + fmt.Sprintf("%x", ExtKey(0xb, "x_custom")) + "  1000000",
		"chunk 1 " + fmt.Sprintf("%x", AttemptKey(a1.AttemptID)) + " job_1_1 0",
		"chunk 3 " + fmt.Sprintf("%x", ExtKey(AttemptKey(a1.AttemptID), "x_custom")) + " job_1_1 0"}
	slices.Sort(want)
	slices.Sort(s.got)
	if !slices.Equal(s.got, want) || !dups[0] || dups[1] {
		t.Errorf("second commit:\n got  %q\n want %q (dups %v)", s.got, want, dups)
	}
	j = tx.DirtyJobs()["job_1_1"]
	if j == nil || j.Attempts != 1 || j.Running != 0 || j.CPUMs != 200 {
		t.Fatalf("job after its attempt ended %+v", j)
	}
	f.Commit(tx, true, &ext)
	if f.Attempt(a1.AttemptID) != nil || len(f.jobs) != 0 || len(f.live) != 0 {
		t.Errorf("an ended attempt, its finished job and its exited process are held: %v %v %v", f.Attempt(a1.AttemptID),
			f.jobs, f.live)
	}
	if len(fs.reads) != 2 {
		t.Errorf("reads %q: want the attempt and its job once", fs.reads)
	}
}

// TestFoldShared: a fold of a store that other servers write takes an
// attempt's state from memory only while the batch that made it is its
// agent's last stored, and does not store a batch another server stored
// since it read the agent's.
func TestFoldShared(t *testing.T) {
	id := "attempt_1_1_m_000001_0"
	fs := &fakeStore{atts: map[string]*AttemptRecord[int]{}, agents: map[string]*AgentState{}, procs: map[uint64][]string{}}
	f := NewFold(fs.options(true, false))
	var ext ExtNames
	a := wire.Attempt{AttemptID: id, JobID: "job_1_1", FirstMs: 1_000_000}
	_, tx, _ := commit(t, f, &ext, foldBatch("ag", 1, []wire.Attempt{a}, nil, nil))
	for _, r := range tx.DirtyAttempts() {
		fs.atts[id] = r
	}
	for id, ag := range tx.StoredAgents() {
		cp := *ag
		fs.agents[id] = &cp
	}
	f.Commit(tx, true, &ext)
	if got := f.TakeDirtyJobs(); !slices.Equal(got, []string{"job_1_1"}) {
		t.Errorf("jobs to add up again %q", got)
	}
	fs.reads = nil
	// Its agent's next batch: the state in memory is the attempt's.
	commit(t, f, &ext, foldBatch("ag", 2, []wire.Attempt{a}, nil, nil))
	if len(fs.reads) != 1 || fs.reads[0] != "agents [ag]" {
		t.Errorf("reads %q: want the agent's last batch again only", fs.reads)
	}
	// Another server stored batches 2 and 3 meanwhile: batch 2 is not
	// stored again, batch 4 is, on the attempt's state read again.
	fs.agents["ag"].Seq = 3
	fs.atts[id].Writer, fs.atts[id].WriterSeq, fs.atts[id].Sum.CPUMs = "ag", 3, 300
	fs.reads = nil
	f = NewFold(fs.options(true, false))
	f.PutAgent("ag", &AgentState{Seq: 1})
	f.atts[id] = &AttemptRecord[int]{AttemptRow: AttemptRow{Meta: a}, Writer: "ag", WriterSeq: 1}
	_, tx, dups := commit(t, f, &ext, foldBatch("ag", 2, []wire.Attempt{a}, nil, nil), foldBatch("ag", 4, []wire.Attempt{a}, nil, nil))
	if dups[0] || dups[1] || len(tx.Prepared()) != 1 || tx.Prepared()[0].Batch.Seq != 4 {
		t.Errorf("after another server stored 2 and 3: %d batches to store", len(tx.Prepared()))
	}
	if d := tx.DirtyAttempts(); len(d) != 1 || d[0].Sum.CPUMs != 400 || d[0].WriterSeq != 4 {
		t.Errorf("the attempt %+v, want its state read again then batch 4's", d)
	}
	if !slices.Contains(fs.reads, "attempts [attempt_1_1_m_000001_0]") {
		t.Errorf("reads %q: the attempt's state not read again", fs.reads)
	}
	// A failed commit: its states are read again next time.
	f.Failed(tx)
	if f.Attempt(id) != nil {
		t.Error("a state of a failed commit is held")
	}
}

// TestFoldRecheckSequences: with AgentSeqs, a commit's recheck reads the
// agents' sequences, and whole rows only of those another server moved
// since: its batch stored there meanwhile is not stored again; when none
// moved, the sequences are all it reads.
func TestFoldRecheckSequences(t *testing.T) {
	fs := &fakeStore{atts: map[string]*AttemptRecord[int]{}, agents: map[string]*AgentState{"a": {Seq: 1}, "b": {Seq: 1}},
		procs: map[uint64][]string{}}
	o := fs.options(true, false)
	o.AgentSeqs = func(_ context.Context, ids []string) (map[string]uint64, error) {
		fs.reads = append(fs.reads, fmt.Sprint("sequences of ", len(ids)))
		out := map[string]uint64{}
		for _, id := range ids {
			if a := fs.agents[id]; a != nil {
				out[id] = a.Seq
			}
		}
		return out, nil
	}
	f := NewFold(o)
	f.PutAgent("a", &AgentState{Seq: 1})
	f.PutAgent("b", &AgentState{Seq: 1})
	recheck := func(bs ...*wire.Batch) *FoldTx[int] {
		t.Helper()
		tx := f.Begin(0)
		for _, b := range bs {
			if dup, err := tx.Append(context.Background(), Prepare(b)); err != nil || dup {
				t.Fatalf("append %s %d: dup %v, %v", b.AgentID, b.Seq, dup, err)
			}
		}
		fs.reads = nil
		if err := tx.Recheck(context.Background()); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	fs.agents["b"].Seq = 2 // another server stored b's seq 2
	tx := recheck(foldBatch("a", 2, nil, nil, nil), foldBatch("b", 2, nil, nil, nil))
	if !slices.Equal(fs.reads, []string{"sequences of 2", "agents [b]"}) {
		t.Errorf("reads %q: want the sequences, then b's row only", fs.reads)
	}
	if p := tx.Prepared(); len(p) != 1 || p[0].Batch.AgentID != "a" {
		t.Errorf("%d batches to store, want a's only", len(p))
	}
	if got := tx.StoredAgents()["b"]; got != nil {
		t.Errorf("b's state to store %+v: its batch was stored by another server", got)
	}
	f.PutAgent("b", &AgentState{Seq: 2})
	recheck(foldBatch("a", 2, nil, nil, nil), foldBatch("b", 3, nil, nil, nil))
	if !slices.Equal(fs.reads, []string{"sequences of 2"}) {
		t.Errorf("reads %q: want the sequences only", fs.reads)
	}
}

// TestFoldLoadAgents: a shared fold reads the agents of a group it does
// not hold in one read (FoldTx.LoadAgents), and Append decides
// duplicates from it without reading each agent again; the commit's
// recheck does not read again the agents the transaction read.
func TestFoldLoadAgents(t *testing.T) {
	fs := &fakeStore{atts: map[string]*AttemptRecord[int]{}, agents: map[string]*AgentState{"b": {Seq: 5}},
		procs: map[uint64][]string{}}
	f := NewFold(fs.options(true, false))
	tx := f.Begin(0)
	if err := tx.LoadAgents(context.Background(), []string{"a", "b", "c", "a"}); err != nil {
		t.Fatal(err)
	}
	if len(fs.reads) != 1 || fs.reads[0] != "agents [a b c]" {
		t.Errorf("reads %q: want the three agents at once", fs.reads)
	}
	var dups []bool
	for _, b := range []*wire.Batch{foldBatch("a", 1, nil, nil, nil), foldBatch("b", 5, nil, nil, nil),
		foldBatch("b", 6, nil, nil, nil), foldBatch("c", 1, nil, nil, nil)} {
		dup, err := tx.Append(context.Background(), Prepare(b))
		if err != nil {
			t.Fatal(err)
		}
		dups = append(dups, dup)
	}
	if !slices.Equal(dups, []bool{false, true, false, false}) {
		t.Errorf("duplicates %v: want b's seq 5 only", dups)
	}
	if len(fs.reads) != 1 {
		t.Errorf("reads %q: Append read agents again", fs.reads)
	}
	// An agent held from an earlier commit (d), and one Append reads
	// alone (e): the recheck reads d only, the others were read by this
	// transaction.
	f.PutAgent("d", &AgentState{Seq: 1})
	fs.agents["e"] = &AgentState{Seq: 2}
	for _, b := range []*wire.Batch{foldBatch("d", 2, nil, nil, nil), foldBatch("e", 3, nil, nil, nil)} {
		if dup, err := tx.Append(context.Background(), Prepare(b)); err != nil || dup {
			t.Fatalf("append %s: dup %v, %v", b.AgentID, dup, err)
		}
	}
	fs.reads = nil
	if err := tx.Recheck(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fs.reads, []string{"agents [d]"}) {
		t.Errorf("the recheck read %q: want agent d alone", fs.reads)
	}
}

// TestFoldChunksAnyGrouping: a batch's chunks are filed under the same
// jobs whatever batches are committed with it, alone or with those before
// and after. ClickHouse keeps a chunk once only if every write of it (a
// commit's that failed half way, and its retry's, grouped otherwise) has
// the same key, its job's among them. The batches: an attempt and its two
// processes; the child exits; the attempt ends while its JVM lingers and
// sends samples alone (no record of it, no attempt's series); the JVM
// exits. Every chunk is under the attempt's job.
func TestFoldChunksAnyGrouping(t *testing.T) {
	att := wire.Attempt{AttemptID: "attempt_1_1_m_000001_0", JobID: "job_1_1", FirstMs: 1_000_000}
	jvm := wire.Process{Key: 0xa, PID: 10, StartMs: 1_000_000, Cmdline: "java YarnChild", Role: wire.RoleTaskJVM}
	child := wire.Process{Key: 0xb, PID: 11, StartMs: 1_000_000, Cmdline: "python map.py"}
	batches := func() []*wire.Batch {
		childEnd, jvmEnd := child, jvm
		childEnd.EndMs, jvmEnd.EndMs = 1_012_000, 1_032_000
		ended := att
		ended.Ended, ended.LastMs = true, 1_020_000
		samplesOnly := func(seq uint64) *wire.Batch {
			b := foldBatch("ag", seq, nil, nil, []wire.Process{jvm})
			b.Processes = nil
			return b
		}
		return []*wire.Batch{
			foldBatch("ag", 1, []wire.Attempt{att}, []wire.Membership{{Process: 0xa, AttemptID: att.AttemptID, FromMs: 1_000_000},
				{Process: 0xb, AttemptID: att.AttemptID, FromMs: 1_000_000}}, []wire.Process{jvm, child}),
			foldBatch("ag", 2, []wire.Attempt{att}, nil, []wire.Process{jvm, child}),
			foldBatch("ag", 3, []wire.Attempt{att}, nil, []wire.Process{jvm, childEnd}),
			foldBatch("ag", 4, []wire.Attempt{ended}, nil, []wire.Process{jvm}),
			samplesOnly(5),
			samplesOnly(6),
			foldBatch("ag", 7, nil, nil, []wire.Process{jvmEnd}),
		}
	}
	for _, groups := range [][]int{{7}, {1, 1, 1, 1, 1, 1, 1}, {2, 2, 2, 1}, {1, 4, 2}, {3, 4}} {
		t.Run(fmt.Sprint(groups), func(t *testing.T) {
			fs := &fakeStore{atts: map[string]*AttemptRecord[int]{}}
			f := NewFold(fs.options(false, true))
			var ext ExtNames
			bs := batches()
			var got []string
			for _, n := range groups {
				s, tx, _ := commit(t, f, &ext, bs[:n]...)
				bs = bs[n:]
				for _, a := range tx.DirtyAttempts() {
					fs.atts[a.Meta.AttemptID] = a.copyOf()
				}
				f.Commit(tx, true, &ext)
				for _, g := range s.got {
					if strings.HasPrefix(g, "chunk ") {
						got = append(got, g)
					}
				}
			}
			for _, g := range got {
				if f := strings.Fields(g); len(f) != 5 || f[3] != "job_1_1" {
					t.Errorf("%q: not under the attempt's job", g)
				}
			}
			// 7 batches: the attempt's 2 series in 4, the JVM's 2 in 7,
			// the child's 2 in 3.
			if len(got) != 2*4+2*7+2*3 {
				t.Errorf("%d chunks: %q", len(got), got)
			}
		})
	}
}

// TestFoldKeepsEnded: with KeepEnded, a fold of a shared store keeps an
// ended attempt: a process of it that exits later touches it without a
// read, while every batch its agent stored since went through the fold,
// and it writes the same row as a fold that let it go and read it again.
// Another server's batch of the agent since has it read again, and the
// fold holds at most KeepEnded ended attempts.
func TestFoldKeepsEnded(t *testing.T) {
	id := "attempt_1_1_m_000001_0"
	att := wire.Attempt{AttemptID: id, JobID: "job_1_1", FirstMs: 1_000_000}
	jvm := wire.Process{Key: 0xa, PID: 10, StartMs: 1_000_000, Cmdline: "java YarnChild", Role: wire.RoleTaskJVM}
	ended := att
	ended.Ended, ended.LastMs = true, 1_010_000
	jvmEnd := jvm
	jvmEnd.EndMs = 1_030_000
	samplesOnly := func(seq uint64) *wire.Batch {
		b := foldBatch("ag", seq, nil, nil, []wire.Process{jvm})
		b.Processes = nil
		return b
	}
	batches := []*wire.Batch{
		foldBatch("ag", 1, []wire.Attempt{att}, []wire.Membership{{Process: 0xa, AttemptID: id, FromMs: 1_000_000}},
			[]wire.Process{jvm}),
		foldBatch("ag", 2, []wire.Attempt{ended}, nil, []wire.Process{jvm}),
		samplesOnly(3),
		foldBatch("ag", 4, nil, nil, []wire.Process{jvmEnd}),
	}
	// run commits the batches one a commit, storing what each writes, and
	// returns the row the last one wrote of the attempt and the reads of
	// the last commit. other, if set, stores the batch before the last in
	// place of the fold (another server).
	run := func(keep int, other func(fs *fakeStore)) (AttemptRow, []string) {
		fs := &fakeStore{atts: map[string]*AttemptRecord[int]{}, agents: map[string]*AgentState{}, procs: map[uint64][]string{}}
		o := fs.options(true, false)
		o.KeepEnded = keep
		f := NewFold(o)
		var ext ExtNames
		var row AttemptRow
		for i, b := range batches {
			if i == len(batches)-2 && other != nil {
				other(fs) // (it stores this batch)
				continue
			}
			if i == len(batches)-1 {
				fs.reads = nil
			}
			_, tx, _ := commit(t, f, &ext, b)
			for _, a := range tx.DirtyAttempts() {
				fs.atts[a.Meta.AttemptID] = a.copyOf()
				row = a.AttemptRow
			}
			for aid, ag := range tx.StoredAgents() {
				cp := *ag
				fs.agents[aid] = &cp
			}
			f.Commit(tx, true, &ext)
			if keep == 0 && i == 1 && f.Attempt(id) != nil {
				t.Error("without KeepEnded, the ended attempt is held")
			}
		}
		return row, fs.reads
	}
	const read = "attempts [" + "attempt_1_1_m_000001_0" + "]"
	letGo, reads := run(0, nil)
	if !slices.Contains(reads, read) {
		t.Errorf("let go, reads %q: want the attempt read again", reads)
	}
	kept, reads := run(4, nil)
	if slices.Contains(reads, read) {
		t.Errorf("kept, reads %q: the attempt read again", reads)
	}
	if kept != letGo {
		t.Errorf("kept, the attempt's row %+v, let go and read again %+v", kept, letGo)
	}
	if kept.NProcs != 1 || kept.Sum.CPUMs != 200 || !kept.Meta.Ended {
		t.Errorf("the attempt's row %+v: want 1 process, 200 ms of CPU, ended", kept)
	}
	// Another server stored batch 3 of the agent, with the attempt's CPU:
	// the state held is not taken.
	other := func(fs *fakeStore) {
		fs.agents["ag"].Seq = 3
		fs.atts[id].Writer, fs.atts[id].WriterSeq, fs.atts[id].Sum.CPUMs = "ag", 3, 300
	}
	moved, reads := run(4, other)
	if !slices.Contains(reads, read) || moved.Sum.CPUMs != 300 {
		t.Errorf("kept, after another server stored: reads %q, CPU %d ms: want the attempt read again, 300 ms", reads,
			moved.Sum.CPUMs)
	}

	// At most KeepEnded: the first of two ended attempts is let go.
	fs := &fakeStore{atts: map[string]*AttemptRecord[int]{}, agents: map[string]*AgentState{}, procs: map[uint64][]string{}}
	o := fs.options(true, false)
	o.KeepEnded = 1
	f := NewFold(o)
	var ext ExtNames
	second := ended
	second.AttemptID = "attempt_1_1_m_000002_0"
	for i, a := range []wire.Attempt{ended, second} {
		_, tx, _ := commit(t, f, &ext, foldBatch("ag", uint64(i+1), []wire.Attempt{a}, nil, nil))
		f.Commit(tx, true, &ext)
	}
	if f.Attempt(id) != nil || f.Attempt(second.AttemptID) == nil {
		t.Errorf("KeepEnded 1: held %v and %v, want the second only", f.Attempt(id) != nil, f.Attempt(second.AttemptID) != nil)
	}
}
