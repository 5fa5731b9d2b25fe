// Package cgroups reads what the agent needs of the cgroup filesystem:
// which cgroup holds a YARN container, on cgroup v1 (the memory
// controller's hierarchy, <root>/memory/<hierarchy>/<container>) or on
// the unified hierarchy of cgroup v2 (<root>/<hierarchy>/<container>, the
// "0::" line of /proc/PID/cgroup), whether it has a memory limit, and the
// kernel's OOM kills in it: on v2 from its memory.events (oom_kill),
// watched with inotify (watch.go); v1's eventfds are the tracker's.
//
// YARN puts each container's processes in <hierarchy>/<container id>,
// where the hierarchy is yarn.nodemanager.linux-container-executor.cgroups.hierarchy
// ("/hadoop-yarn" by default; a path, possibly of several levels, e.g.
// "/yarn.slice/nm1"), under each v1 controller's mount or the v2 mount.
package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultRoot is where the cgroup filesystems are mounted.
const DefaultRoot = "/sys/fs/cgroup"

// DefaultHierarchy is yarn.nodemanager.linux-container-executor.cgroups.hierarchy's
// default.
const DefaultHierarchy = "hadoop-yarn"

// Unified says whether the hierarchy mounted at root is cgroup v2's (its
// top holds cgroup.controllers; v1 mounts one directory per controller
// there).
func Unified(root string) bool {
	_, err := os.Stat(filepath.Join(root, "cgroup.controllers"))
	return err == nil
}

// Hierarchy normalises a YARN cgroup hierarchy ("/hadoop-yarn/" ->
// "hadoop-yarn"); "" for an empty one.
func Hierarchy(h string) string {
	return strings.Trim(filepath.Clean("/"+strings.TrimSpace(h)), "/")
}

// Path is a container's cgroup, relative to its hierarchy's mount.
type Path struct {
	Rel string // "/hadoop-yarn/container_..."
	V2  bool   // on the unified hierarchy (else v1's memory controller)
}

// Dir is the cgroup's directory under root: root/memory/Rel on v1,
// root/Rel on v2.
func (p Path) Dir(root string) string {
	if p.V2 {
		return filepath.Join(root, p.Rel)
	}
	return filepath.Join(root, "memory", p.Rel)
}

// ContainerPath finds the memory cgroup of container in the content of a
// member's /proc/PID/cgroup ("<id>:<controllers>:<path>" lines): the line
// of v1's memory controller if there is one (on a hybrid system the
// memory controller is v1's), else v2's unified line ("0::<path>"), whose
// path is <...>/<hierarchy>/<container> for one of hierarchies.
func ContainerPath(b []byte, hierarchies []string, container string) (Path, bool) {
	var v2 string
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		parts := bytes.SplitN(line, []byte(":"), 3)
		if len(parts) != 3 {
			continue
		}
		p := string(parts[2])
		if !inHierarchy(p, hierarchies, container) {
			continue
		}
		if string(parts[0]) == "0" && len(parts[1]) == 0 {
			v2 = p
			continue
		}
		for _, c := range bytes.Split(parts[1], []byte(",")) {
			if string(c) == "memory" {
				return Path{Rel: p}, true
			}
		}
	}
	if v2 != "" {
		return Path{Rel: v2, V2: true}, true
	}
	return Path{}, false
}

// inHierarchy says whether p is <...>/<h>/<container> for one of hs.
func inHierarchy(p string, hs []string, container string) bool {
	if !strings.HasSuffix(p, "/"+container) {
		return false
	}
	parent := p[:len(p)-len(container)]
	for _, h := range hs {
		if h != "" && strings.HasSuffix(parent, "/"+h+"/") {
			return true
		}
	}
	return false
}

// UnderHierarchy says whether a cgroup path (of any line of
// /proc/PID/cgroup, v1's or v2's) is under one of YARN's hierarchies, and
// returns it from the hierarchy on ("/hadoop-yarn/container_..."), where
// a container's id follows.
func UnderHierarchy(path string, hierarchies []string) (string, bool) {
	for _, h := range hierarchies {
		if h == "" {
			continue
		}
		if i := strings.Index(path, "/"+h+"/"); i >= 0 {
			return path[i:], true
		}
	}
	return "", false
}

// HasMemoryLimit says whether the cgroup at dir limits its memory (v1:
// memory.limit_in_bytes below the kernel's "unlimited"; v2: memory.max
// not "max"), so that the OOM killer can act in it of its own.
func HasMemoryLimit(dir string, v2 bool) (bool, error) {
	name := "memory.limit_in_bytes"
	if v2 {
		name = "memory.max"
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return false, err
	}
	s := strings.TrimSpace(string(b))
	if v2 && s == "max" {
		return false, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return false, fmt.Errorf("%s: not a size: %.40q", filepath.Join(dir, name), s)
	}
	return v < 1<<62, nil
}

// MemoryEvents is cgroup v2's memory.events: how often the cgroup (and,
// unless the hierarchy is mounted with memory_localevents, its
// descendants) hit each memory event.
type MemoryEvents struct {
	Low, High, Max uint64
	OOM            uint64 // the OOM killer was invoked
	OOMKill        uint64 // processes it killed
	OOMGroupKill   uint64 // groups killed whole (memory.oom.group)
}

// maxEventsFile bounds what is read of memory.events (six short lines).
const maxEventsFile = 1 << 10

// ParseMemoryEvents parses memory.events ("<name> <count>" lines; names
// it does not know are skipped, as newer kernels add some).
func ParseMemoryEvents(b []byte) (MemoryEvents, error) {
	var ev MemoryEvents
	if len(b) > maxEventsFile {
		return ev, errors.New("memory.events: too long")
	}
	seen := false
	for _, line := range bytes.Split(b, []byte("\n")) {
		name, val, ok := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
		if !ok {
			if len(bytes.TrimSpace(line)) > 0 {
				return ev, fmt.Errorf("memory.events: not a counter: %.40q", line)
			}
			continue
		}
		v, err := strconv.ParseUint(string(bytes.TrimSpace(val)), 10, 64)
		if err != nil {
			return ev, fmt.Errorf("memory.events: %s: %w", name, err)
		}
		seen = true
		switch string(name) {
		case "low":
			ev.Low = v
		case "high":
			ev.High = v
		case "max":
			ev.Max = v
		case "oom":
			ev.OOM = v
		case "oom_kill":
			ev.OOMKill = v
		case "oom_group_kill":
			ev.OOMGroupKill = v
		}
	}
	if !seen {
		return ev, errors.New("memory.events: empty")
	}
	return ev, nil
}

// Hierarchies are the YARN cgroup hierarchies containers are looked for
// under: the configured one (the agent's --cgroup-prefix), and those each
// NodeManager's yarn-site.xml names. Not safe for concurrent use.
type Hierarchies struct {
	names []string
}

// maxHierarchies bounds the hierarchies learned (one per NodeManager).
const maxHierarchies = 16

// NewHierarchies starts with the hierarchy h (none if empty).
func NewHierarchies(h string) *Hierarchies {
	hs := &Hierarchies{}
	hs.Add(h)
	return hs
}

// Add adds a hierarchy (as yarn-site.xml writes it: "/hadoop-yarn"),
// unless it is known, empty, or too many are.
func (hs *Hierarchies) Add(h string) {
	h = Hierarchy(h)
	if h == "" || len(hs.names) >= maxHierarchies {
		return
	}
	for _, n := range hs.names {
		if n == h {
			return
		}
	}
	hs.names = append(hs.names, h)
}

// Names are the hierarchies, the configured one first. The caller must
// not change them.
func (hs *Hierarchies) Names() []string { return hs.names }
