package tracker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJobConfOncePerJob: the job.xml copies of a job's containers are
// parsed once; another job's, a copy of another size, and a job whose
// attempts stopped coming long ago are parsed again.
func TestJobConfOncePerJob(t *testing.T) {
	dir := t.TempDir()
	write := func(name, jobName string, extra int) *os.File {
		doc := `<configuration><property><name>mapreduce.job.name</name><value>` + jobName + `</value></property>` +
			`<property><name>mapreduce.map.memory.mb</name><value>2048</value></property>` +
			`<property><name>unrelated</name><value>` + strings.Repeat("x", extra) + `</value></property></configuration>`
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	var c jobConfs
	read := func(job string, f *os.File, wantName string, wantParses uint64) {
		t.Helper()
		conf, err := c.read(job, f)
		if err != nil {
			t.Fatal(err)
		}
		if jc := conf.JobConfFor("map"); jc.JobName != wantName || jc.MemoryMB != 2048 {
			t.Errorf("%s: %+v", job, jc)
		}
		if _, ok := conf["unrelated"]; ok {
			t.Errorf("%s: kept a key JobConfFor does not read", job)
		}
		if c.parses != wantParses {
			t.Errorf("%s at read %d: %d parses, want %d", job, c.reads, c.parses, wantParses)
		}
	}
	read("job_1_0001", write("a.xml", "wc", 10), "wc", 1)
	read("job_1_0001", write("b.xml", "wc", 10), "wc", 1)       // the same job's copy
	read("job_1_0002", write("c.xml", "sort", 10), "sort", 2)   // another job
	read("job_1_0001", write("d.xml", "wc-v2", 20), "wc-v2", 3) // another size
	read("job_1_0001", write("e.xml", "wc-v2", 20), "wc-v2", 3) // as that one
	read("", write("f.xml", "nojob", 10), "nojob", 4)           // no job id: never kept
	read("", write("g.xml", "nojob", 10), "nojob", 5)
	for c.reads < 2*jobConfIdleReads {
		read("job_1_0003", write("i.xml", "other", 10), "other", 6)
	}
	read("job_1_0002", write("h.xml", "sort", 10), "sort", 7) // forgotten meanwhile
	if len(c.byJob) != 2 {
		t.Errorf("%d jobs kept, want the two read last", len(c.byJob))
	}
}
