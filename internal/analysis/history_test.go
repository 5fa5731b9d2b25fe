package analysis

import (
	"testing"

	"github.com/taskscope/taskscope/internal/store"
)

// A running job's earlier runs read after a look hold until a later look
// sees a finished job of its recurring job written that ended before the
// job started (another recurring job's runs leave them); a look
// cut at its limit, or one too long ago, makes them read again.
func TestLateLog(t *testing.T) {
	finished := func(changed, end int64) store.AnalysisState {
		return store.AnalysisState{Job: store.Job{State: store.StateFinished, End: store.Time(end)}, Changed: store.Time(changed)}
	}
	running := func(changed int64) store.AnalysisState {
		return store.AnalysisState{Job: store.Job{State: store.StateRunning}, Changed: store.Time(changed)}
	}
	key := runKey("", "", "") // (the jobs' below)
	var l lateLog
	if l.unchanged(l.now(), 1000, key) {
		t.Error("held before any look")
	}
	l.note([]store.AnalysisState{finished(100_000, 500), running(100_000)}, true)
	l.note([]store.AnalysisState{finished(100_000, 500), running(200_000)}, true)
	read := l.now() // runs read after the second look
	l.note([]store.AnalysisState{finished(100_000, 500), running(200_000)}, true)
	if !l.unchanged(read, 1000, key) {
		t.Error("a job written long before the read, seen again, and running jobs made them read again")
	}
	l.note([]store.AnalysisState{finished(300_000, 2000), running(300_000)}, true)
	if !l.unchanged(read, 1000, key) {
		t.Error("a job that ended after the job started made them read again")
	}
	if l.unchanged(read, 2000, key) {
		t.Error("a job that ended before (or as) the job started, written since, left them")
	}
	// Another recurring job's runs leave them.
	other := finished(300_000, 500)
	other.Job.Name, other.Job.User = "wordcount 2026-12-01", "alice"
	l.note([]store.AnalysisState{other}, true)
	if !l.unchanged(read, 1000, key) {
		t.Error("another recurring job's run made them read again")
	}
	if l.unchanged(read, 1000, runKey("alice", "", "wordcount 2026-12-07")) {
		t.Error("a run of the job's recurring job (its name's date normalized) left them")
	}
	// A write the look before did not see (stamped a little before the
	// latest it saw) counts as new.
	l.note([]store.AnalysisState{finished(300_000-lateSkew/2, 800)}, true)
	if l.unchanged(read, 1000, key) {
		t.Error("a write stamped before the last look's latest left them")
	}
	read = l.now()
	l.note([]store.AnalysisState{finished(300_000-2*lateSkew, 800)}, true)
	if !l.unchanged(read, 1000, key) {
		t.Error("a write seen long before made them read again")
	}
	l.note(nil, false)
	if l.unchanged(read, 1000, key) {
		t.Error("a look cut at its limit left them")
	}
	read = l.now()
	for i := 0; i < maxLooks; i++ {
		l.note(nil, true)
	}
	if !l.unchanged(read, 1000, key) {
		t.Errorf("held %d looks", maxLooks-1)
	}
	l.note(nil, true)
	if l.unchanged(read, 1000, key) || len(l.ends) > 0 {
		t.Errorf("held past %d looks, %d kept", maxLooks, len(l.ends))
	}
}
