package tracker

import (
	"bytes"
	"testing"

	"github.com/taskscope/taskscope/internal/wire"
)

// FuzzClassify gives the tracker a process with arbitrary command line,
// environment and cgroup, under a task JVM, under the NodeManager and
// under init: it must not fail, and what it reports must be valid.
func FuzzClassify(f *testing.F) {
	c2, m0 := fxContainer(2), fxAttempt("m", 0, 0)
	f.Add([]byte("/bin/bash\x00-c\x00java org.apache.hadoop.mapred.YarnChild h 1 "+m0+" 2\x00"), []byte("CONTAINER_ID="+c2+"\x00"), []byte("0::/hadoop-yarn/"+c2+"\n"))
	f.Add([]byte("java\x00-Dyarn.app.container.log.dir=/l/"+fxApp+"/"+c2+"\x00org.apache.tez.runtime.task.TezChild\x00h\x001\x00"+c2+"\x00"), []byte("mapred_task_id="+m0), []byte(""))
	f.Add([]byte("bash\x00/x/ttprivate/taskTracker/u/jobcache/job_1_0001/attempt_1_0001_m_000000_0/taskjvm.sh\x00"), []byte("\x00\x00=\x00"), []byte("::\n:::\n"))
	f.Add([]byte("<b>\xff\x00\x00"), []byte("mapreduce_task_attempt_id=attempt_x"), []byte("1:a:/hadoop-yarn/container_1_2_3_4\n"))
	f.Fuzz(func(t *testing.T, cmdline, environ, cgroup []byte) {
		if len(cmdline) > 1<<16 || len(environ) > 1<<16 || len(cgroup) > 1<<12 {
			return
		}
		fx := newFixture(t)
		fxYARNNode(fx)
		yarnContainer(fx, 2001, c2, yarnChild(c2, m0))
		env := string(environ)
		for i, ppid := range []int32{2003, fxNMPID, 1} {
			fx.add(fproc{pid: int32(3000 + i), ppid: ppid, sid: int32(3000 + i), comm: "fuzz", cmdline: append([]byte{}, cmdline...),
				env: []string{env}, cgroup: string(cgroup) + "\n"})
		}
		r := fx.tracker(false)
		r.tick()
		r.tick()
		var b wire.Batch
		b.Version, b.AgentID, b.Seq, b.Host = wire.Version, "a", 1, "h"
		for _, p := range r.sink.procs {
			b.Processes = append(b.Processes, p)
		}
		for _, a := range r.sink.attempts {
			b.Attempts = append(b.Attempts, a)
		}
		if err := wire.Validate(&b); err != nil {
			t.Fatalf("invalid batch: %v", err)
		}
		if _, p, ok := viewOf(r.tr, 3000); !ok || bytes.IndexByte([]byte(p.Cmdline), 0) >= 0 {
			t.Fatalf("the JVM's child: tracked %v, cmdline %q", ok, p.Cmdline)
		}
	})
}
