package tracker

import (
	"bytes"
	"os"
	"strings"

	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/nodemanager"
)

// daemonConf is what a daemon's conf dir says.
type daemonConf struct {
	kind                 hadoop.Kind
	confDir              string // as the daemon sees it
	mapSlots, reduceSlot int64
	endpoint             nodemanager.Endpoint
	localDirs            []string // yarn.nodemanager.local-dirs, mapred.local.dir
}

// IsDaemon reports whether pid is a Hadoop daemon the tracker knows (for
// the reaper's protection).
func (t *Tracker) IsDaemon(pid int32) bool {
	p := t.procs[pid]
	return p != nil && p.state == stDaemon
}

// readDaemonConf finds a daemon's conf dir (HADOOP_CONF_DIR or
// YARN_CONF_DIR in its environment, else the first entry of its classpath)
// and reads the slots (TaskTracker) or the web address (NodeManager) there.
// Paths are read through <procfs>/<pid>/root, as the daemon sees them.
func (a *attributor) readDaemonConf(pid int32, kind hadoop.Kind) *daemonConf {
	dc := &daemonConf{kind: kind, mapSlots: 2, reduceSlot: 2} // Hadoop 1's defaults
	root := a.fs.PidPath(pid, "root")
	var dirs []string
	if b, err := a.fs.ReadPidFile(pid, "environ", nil); err == nil {
		for _, kv := range bytes.Split(b, []byte{0}) {
			for _, name := range []string{"HADOOP_CONF_DIR=", "YARN_CONF_DIR="} {
				if v, ok := bytes.CutPrefix(kv, []byte(name)); ok && len(v) > 0 {
					dirs = append(dirs, string(v))
				}
			}
		}
	}
	if b, err := a.fs.ReadPidFile(pid, "cmdline", nil); err == nil {
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-classpath" || args[i] == "-cp" {
				if first, _, _ := strings.Cut(args[i+1], ":"); first != "" {
					dirs = append(dirs, first)
				}
				break
			}
		}
	}
	for _, d := range dirs {
		if !strings.HasPrefix(d, "/") {
			continue
		}
		switch kind {
		case hadoop.KindTaskTracker:
			f, err := os.Open(root + d + "/mapred-site.xml")
			if err != nil {
				continue
			}
			conf, err := hadoop.ParseConf(f)
			f.Close()
			if err != nil {
				a.errs.count("mapred-site.xml", err)
				continue
			}
			dc.confDir = d
			dc.localDirs = localDirsOf(conf, kind)
			if n, ok := conf.Int("mapred.tasktracker.map.tasks.maximum"); ok {
				dc.mapSlots = n
			}
			if n, ok := conf.Int("mapred.tasktracker.reduce.tasks.maximum"); ok {
				dc.reduceSlot = n
			}
			return dc
		case hadoop.KindNodeManager:
			ep, err := nodemanager.ReadEndpoint(root, d)
			if err != nil {
				continue
			}
			dc.confDir, dc.endpoint = d, ep
			if f, err := os.Open(root + d + "/yarn-site.xml"); err == nil {
				if conf, err := hadoop.ParseConf(f); err == nil {
					dc.localDirs = localDirsOf(conf, kind)
					a.hier.Add(conf.First("yarn.nodemanager.linux-container-executor.cgroups.hierarchy"))
				}
				f.Close()
			}
			return dc
		}
	}
	return dc
}

// localDirsOf reads a daemon's local directories from its configuration.
func localDirsOf(conf hadoop.Conf, kind hadoop.Kind) []string {
	key := "yarn.nodemanager.local-dirs"
	if kind == hadoop.KindTaskTracker {
		key = "mapred.local.dir"
	}
	var dirs []string
	for _, d := range strings.Split(conf.First(key), ",") {
		if d = strings.TrimSpace(d); strings.HasPrefix(d, "/") && !strings.Contains(d, "${") {
			dirs = append(dirs, d)
		}
	}
	return dirs
}
