package simulator

import (
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// h1JobConf is a Hadoop 1 job's job.xml.
func (c *Cluster) h1JobConf(j *Job) confList {
	s := j.Spec
	mb := strconv.Itoa(c.containerMB(s))
	conf := confList{
		{"mapred.job.name", s.Name},
		{"user.name", s.User},
		{"mapred.job.queue.name", s.Queue},
		{"mapred.job.tracker", "127.0.0.1:8021"},
		{"mapred.map.tasks", strconv.Itoa(s.Maps)},
		{"mapred.reduce.tasks", strconv.Itoa(s.Reduces)},
		{"mapred.job.map.memory.mb", mb},
		{"mapred.job.reduce.memory.mb", mb},
		{"mapred.child.java.opts", c.taskJavaOpts(s)},
		{"mapred.job.reuse.jvm.num.tasks", strconv.Itoa(s.JVMReuse)},
		{"mapred.input.dir", "hdfs://127.0.0.1:8020/user/" + s.User + "/input"},
		{"mapred.output.dir", "hdfs://127.0.0.1:8020/user/" + s.User + "/output/" + j.ID},
		{"mapred.jar", "/tmp/hadoop-" + s.User + "/mapred/staging/" + s.User + "/.staging/" + j.ID + "/job.jar"},
		{"mapreduce.job.dir", "hdfs://127.0.0.1:8020/tmp/hadoop-" + s.User + "/mapred/staging/" + s.User + "/.staging/" + j.ID},
	}
	if s.Kind == JobHadoop1Streaming {
		conf.set("stream.map.streamprocessor", url.QueryEscape("mapper.sh"))
		conf.set("stream.reduce.streamprocessor", url.QueryEscape("python3 reducer.py"))
		conf.set("mapred.input.format.class", "org.apache.hadoop.mapred.TextInputFormat")
	}
	c.workConf(&conf, j)
	return conf
}

// runHadoop1 runs the maps, then the reduces, on TaskTrackers' slots; then
// tells the TaskTrackers the job is over, so its idle JVMs exit.
func (c *Cluster) runHadoop1(j *Job) error {
	s := j.Spec
	conf := c.h1JobConf(j)
	var jars []resource
	if s.Kind == JobHadoop1Streaming {
		jars = []resource{
			{Name: "mapper.sh", Link: "mapper.sh", Data: []byte(mapperScript), Exec: true},
			{Name: "reducer.py", Link: "reducer.py", Data: []byte(reducerScript), Exec: true},
		}
	}
	lostAfter := max(c.scaled(1500*time.Millisecond), time.Second)
	run := func(typ string, i int) error {
		idx := 0
		if typ == "r" {
			idx = 1
		}
		var last string
		for n := 0; n < 4; n++ {
			node, err := c.acquire(NodeHadoop1, idx)
			if err != nil {
				return err
			}
			attempt := attemptID(c.ts, j.seq, typ, i, n)
			req := &assignReq{Attempt: attempt, Job: j.ID, User: s.User, Type: typ, JobConf: conf, Reuse: s.JVMReuse,
				Hang: s.LostChild && typ == "m" && i == 0 && n == 0, JavaOpts: c.taskJavaOpts(s), Jars: jars,
				LostAfterMs: lostAfter.Milliseconds()}
			out := c.assign(node, req)
			c.release(node, idx)
			if out.err == ErrClosed.Error() {
				return ErrClosed
			}
			if out.code == 0 && !out.lost && !out.orphaned {
				return nil
			}
			last = fmt.Sprintf("%s: exit %d lost %v orphaned %v %s", attempt, out.code, out.lost, out.orphaned, out.err)
		}
		return fmt.Errorf("task failed 4 times: last %s", last)
	}
	err := c.phase(s.Maps, func(i int) error { return run("m", i) })
	if err == nil && s.Reduces > 0 {
		err = c.phase(s.Reduces, func(i int) error { return run("r", i) })
	}
	c.mu.Lock()
	nodes := append([]*node(nil), c.nodes...)
	c.mu.Unlock()
	for _, n := range nodes {
		if n.info.Kind == NodeHadoop1 {
			n.conn.send(&message{Op: opJobDone, Job: j.ID})
		}
	}
	if werr := c.waitAll(j); err == nil {
		err = werr
	}
	return err
}

// assign gives a TaskTracker an attempt and waits for its outcome.
func (c *Cluster) assign(n *node, req *assignReq) taskOutcome {
	ch := make(chan taskOutcome, 1)
	c.mu.Lock()
	if !n.info.Alive || n.stopping || c.closed {
		c.mu.Unlock()
		return taskOutcome{code: -1, orphaned: true, err: "node gone"}
	}
	n.tasks[req.Attempt] = ch
	c.mu.Unlock()
	if err := n.conn.send(&message{Op: opAssign, Assign: req}); err != nil {
		c.mu.Lock()
		delete(n.tasks, req.Attempt)
		c.mu.Unlock()
		return taskOutcome{code: -1, orphaned: true, err: err.Error()}
	}
	select {
	case o := <-ch:
		return o
	case <-c.ctx.Done():
		return taskOutcome{code: -1, err: ErrClosed.Error()}
	}
}
