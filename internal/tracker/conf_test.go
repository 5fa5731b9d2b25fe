package tracker

import (
	"os"
	"path/filepath"
	"testing"
)

const testJobXML = `<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<configuration>
<property><name>mapreduce.job.name</name><value>wordcount</value><source>programmatically</source></property>
<property><name>mapreduce.job.user.name</name><value>alice</value></property>
<property><name>mapreduce.job.queuename</name><value>etl</value></property>
<property><name>mapreduce.map.memory.mb</name><value>2048</value></property>
<property><name>mapreduce.map.cpu.vcores</name><value>2</value></property>
<property><name>mapreduce.map.java.opts</name><value>-Xmx1638m</value></property>
</configuration>
`

// TestConfRetried: YarnChild rewrites job.xml while its attempt starts, so
// the read at the attempt's start may find it half written, or without its
// keys. The tracker reads it again at later ticks until it says the job's
// name and memory, reports the attempt again with them, and gives up after
// a bounded number of tries.
func TestConfRetried(t *testing.T) {
	c2, m0 := fxContainer(2), fxAttempt("m", 0, 0)
	f := newFixture(t)
	fxYARNNode(f)
	work, _ := yarnContainer(f, 2001, c2, yarnChild(c2, m0))
	cwd := f.dir(work)
	f.set(2003, func(p *fproc) { p.cwd = cwd })
	jobXML := filepath.Join(cwd, "job.xml")
	write := func(s string) {
		if err := os.WriteFile(jobXML, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(testJobXML[:len(testJobXML)/2]) // caught half written
	r := f.tracker(false)
	r.tick()
	if a := r.sink.attempts[m0]; a.MemoryMB != 0 || a.JobName != "" {
		t.Fatalf("half a job.xml read as %+v", a)
	}
	u := r.tr.attr.units[c2]
	if u == nil || u.cur == nil || u.cur.confRetryAt == 0 {
		t.Fatalf("no retry planned")
	}
	// Rewritten without its keys yet: still not what it must say.
	write("<configuration><property><name>mapreduce.job.queuename</name><value>etl</value></property></configuration>")
	r.tick()
	if a := r.sink.attempts[m0]; a.Queue != "etl" || a.MemoryMB != 0 || u.cur.confRetryAt == 0 {
		t.Fatalf("after a job.xml without its keys: %+v, retry at %d", a, u.cur.confRetryAt)
	}
	write(testJobXML)
	for i := 0; i < 3; i++ { // the next retry is 2 ticks on
		r.tick()
	}
	a := r.sink.attempts[m0]
	if a.MemoryMB != 2048 || a.VCores != 2 || a.JobName != "wordcount" || a.User != "alice" || a.XmxBytes != 820<<20 {
		t.Errorf("after the rewrite: %+v (want 2048 MB, 2 vcores, wordcount, alice, the JVM's own -Xmx820m)", a)
	}
	if u.cur.confRetryAt != 0 || u.cur.confTries != 3 {
		t.Errorf("retry at %d after %d tries; want none after 3", u.cur.confRetryAt, u.cur.confTries)
	}

	// A job.xml that never gets right is read a bounded number of times.
	c3, m1 := fxContainer(3), fxAttempt("m", 1, 0)
	work3, _ := yarnContainer(f, 2101, c3, yarnChild(c3, m1))
	cwd3 := f.dir(work3)
	f.set(2103, func(p *fproc) { p.cwd = cwd3 })
	if err := os.WriteFile(filepath.Join(cwd3, "job.xml"), []byte("<configuration>"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		r.tick()
	}
	u3 := r.tr.attr.units[c3]
	if u3 == nil || u3.cur == nil {
		t.Fatal("no unit for the second container")
	}
	if u3.cur.confTries != maxConfTries || u3.cur.confRetryAt != 0 {
		t.Errorf("a broken job.xml read %d times, retry at %d; want %d reads, then none", u3.cur.confTries, u3.cur.confRetryAt, maxConfTries)
	}
	if got := r.tr.SourceErrors()["job.xml"]; got < maxConfTries {
		t.Errorf("%d job.xml errors counted", got)
	}
}
