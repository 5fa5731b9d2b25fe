package tracker

import (
	"os"

	"github.com/taskscope/taskscope/internal/hadoop"
)

// jobConfs keeps, for each job, the part of its job.xml the attempts take
// (hadoop.Conf.JobKeys): every container of a job on a node has a copy of
// the same job.xml, and parsing one (a real job's has some 900 properties)
// costs the agent tens of milliseconds, once per job instead of once per
// attempt. A copy of another size is parsed again. Entries no read used
// in the last jobConfIdleReads reads are dropped.
type jobConfs struct {
	byJob     map[string]*jobConf
	reads     uint64
	lastSweep uint64
	parses    uint64 // job.xml files parsed (tests)
}

type jobConf struct {
	size int64
	conf hadoop.Conf
	used uint64 // the read that last used it
}

const jobConfIdleReads = 256

// read returns the job's configuration from f (job.xml of one of its
// attempts), parsing it unless a copy of the same size was.
func (c *jobConfs) read(jobID string, f *os.File) (hadoop.Conf, error) {
	c.reads++
	cycle := c.reads
	if cycle-c.lastSweep >= jobConfIdleReads {
		c.lastSweep = cycle
		for id, e := range c.byJob {
			if cycle-e.used >= jobConfIdleReads {
				delete(c.byJob, id)
			}
		}
	}
	var size int64 = -1
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	if e := c.byJob[jobID]; e != nil && jobID != "" && size >= 0 && e.size == size {
		e.used = cycle
		return e.conf, nil
	}
	c.parses++
	conf, err := hadoop.ParseConf(f)
	if err != nil {
		return nil, err
	}
	conf = conf.JobKeys()
	if jobID != "" && size >= 0 {
		if c.byJob == nil {
			c.byJob = map[string]*jobConf{}
		}
		c.byJob[jobID] = &jobConf{size: size, conf: conf, used: cycle}
	}
	return conf, nil
}
