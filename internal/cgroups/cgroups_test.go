package cgroups

import (
	"os"
	"path/filepath"
	"testing"
)

const c1 = "container_e07_1700000000000_0042_01_000003"

func TestContainerPath(t *testing.T) {
	yarn := []string{"hadoop-yarn"}
	cases := []struct {
		name, cgroup string
		hs           []string
		want         Path
		ok           bool
	}{
		{"v1", "12:memory:/hadoop-yarn/" + c1 + "\n11:cpu,cpuacct:/hadoop-yarn/" + c1 + "\n0::/\n", yarn, Path{Rel: "/hadoop-yarn/" + c1}, true},
		{"v2", "0::/hadoop-yarn/" + c1 + "\n", yarn, Path{Rel: "/hadoop-yarn/" + c1, V2: true}, true},
		{"hybrid: the memory controller is v1's", "4:memory:/hadoop-yarn/" + c1 + "\n0::/hadoop-yarn/" + c1 + "\n", yarn, Path{Rel: "/hadoop-yarn/" + c1}, true},
		{"hybrid, memory elsewhere: v2's", "4:memory:/\n1:name=systemd:/\n0::/hadoop-yarn/" + c1 + "\n", yarn, Path{Rel: "/hadoop-yarn/" + c1, V2: true}, true},
		{"v2 under a systemd slice", "0::/yarn.slice/nm1/" + c1 + "\n", []string{"hadoop-yarn", "yarn.slice/nm1"}, Path{Rel: "/yarn.slice/nm1/" + c1, V2: true}, true},
		{"v2 under a parent cgroup", "0::/system.slice/hadoop-yarn/" + c1 + "\n", yarn, Path{Rel: "/system.slice/hadoop-yarn/" + c1, V2: true}, true},
		{"another hierarchy", "0::/other/" + c1 + "\n", yarn, Path{}, false},
		{"a hierarchy's name as a prefix only", "0::/hadoop-yarn-2/" + c1 + "\n", yarn, Path{}, false},
		{"another container", "0::/hadoop-yarn/container_e07_1700000000000_0042_01_000004\n", yarn, Path{}, false},
		{"below the container", "0::/hadoop-yarn/" + c1 + "/sub\n", yarn, Path{}, false},
		{"no hierarchy", "0::/hadoop-yarn/" + c1 + "\n", []string{""}, Path{}, false},
		{"garbage", "nonsense\n::\n", yarn, Path{}, false},
	}
	for _, tc := range cases {
		got, ok := ContainerPath([]byte(tc.cgroup), tc.hs, c1)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %+v %v, want %+v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if d := (Path{Rel: "/hadoop-yarn/c", V2: true}).Dir("/sys/fs/cgroup"); d != "/sys/fs/cgroup/hadoop-yarn/c" {
		t.Errorf("v2 dir %s", d)
	}
	if d := (Path{Rel: "/hadoop-yarn/c"}).Dir("/sys/fs/cgroup"); d != "/sys/fs/cgroup/memory/hadoop-yarn/c" {
		t.Errorf("v1 dir %s", d)
	}
}

func TestUnderHierarchy(t *testing.T) {
	for _, tc := range []struct {
		path string
		hs   []string
		want string
	}{
		{"/hadoop-yarn/" + c1, []string{"hadoop-yarn"}, "/hadoop-yarn/" + c1},
		{"/system.slice/hadoop-yarn/" + c1, []string{"hadoop-yarn"}, "/hadoop-yarn/" + c1},
		{"/yarn.slice/nm1/" + c1, []string{"hadoop-yarn", "yarn.slice/nm1"}, "/yarn.slice/nm1/" + c1},
		{"/system.slice/sshd.service", []string{"hadoop-yarn"}, ""},
		{"/hadoop-yarn-2/" + c1, []string{"hadoop-yarn"}, ""},
		{"/", []string{""}, ""},
	} {
		got, ok := UnderHierarchy(tc.path, tc.hs)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%v: %q %v, want %q", tc.path, got, ok, tc.want)
		}
	}
}

func TestHierarchy(t *testing.T) {
	for in, want := range map[string]string{"/hadoop-yarn": "hadoop-yarn", "hadoop-yarn/": "hadoop-yarn", " /yarn.slice/nm1 ": "yarn.slice/nm1", "/": "", "": ""} {
		if got := Hierarchy(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestParseMemoryEvents(t *testing.T) {
	ev, err := ParseMemoryEvents([]byte("low 0\nhigh 12\nmax 40\noom 3\noom_kill 2\noom_group_kill 1\nsock_throttled 0\n"))
	if err != nil || ev != (MemoryEvents{High: 12, Max: 40, OOM: 3, OOMKill: 2, OOMGroupKill: 1}) {
		t.Errorf("%+v %v", ev, err)
	}
	// Kernels before 5.17 have no oom_group_kill; 4.x none of oom_kill.
	if ev, err := ParseMemoryEvents([]byte("low 0\nhigh 0\nmax 0\noom 0\n")); err != nil || ev.OOMKill != 0 {
		t.Errorf("old kernel: %+v %v", ev, err)
	}
	for _, bad := range []string{"", "oom_kill x\n", "oom_kill\n", "oom_kill -1\n", string(make([]byte, 2000))} {
		if _, err := ParseMemoryEvents([]byte(bad)); err == nil {
			t.Errorf("%.20q: no error", bad)
		}
	}
}

func TestHasMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		file, content string
		v2, want, err bool
	}{
		{"memory.max", "max\n", true, false, false},
		{"memory.max", "1073741824\n", true, true, false},
		{"memory.limit_in_bytes", "9223372036854771712\n", false, false, false},
		{"memory.limit_in_bytes", "1073741824\n", false, true, false},
		{"memory.max", "lots\n", true, false, true},
	} {
		os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.content), 0o644)
		got, err := HasMemoryLimit(dir, tc.v2)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s %q: %v %v", tc.file, tc.content, got, err)
		}
	}
	if _, err := HasMemoryLimit(t.TempDir(), true); err == nil {
		t.Error("no memory.max: no error")
	}
}

func TestUnified(t *testing.T) {
	v1, v2 := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(v1, "memory"), 0o755)
	os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("cpu io memory pids\n"), 0o644)
	if Unified(v1) || !Unified(v2) {
		t.Errorf("v1 %v, v2 %v", Unified(v1), Unified(v2))
	}
}

func FuzzContainerPath(f *testing.F) {
	f.Add([]byte("12:memory:/hadoop-yarn/"+c1+"\n0::/hadoop-yarn/"+c1+"\n"), "hadoop-yarn")
	f.Add([]byte("0::/a/b/"+c1), "a/b")
	f.Fuzz(func(t *testing.T, b []byte, h string) {
		p, ok := ContainerPath(b, []string{h}, c1)
		if ok && (len(p.Rel) > len(b) || p.Rel[len(p.Rel)-len(c1):] != c1) {
			t.Fatalf("%+v from %q", p, b)
		}
	})
}

func FuzzParseMemoryEvents(f *testing.F) {
	f.Add([]byte("low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\noom_group_kill 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) { ParseMemoryEvents(b) })
}

func TestHierarchies(t *testing.T) {
	hs := NewHierarchies("hadoop-yarn")
	hs.Add("/hadoop-yarn/")
	hs.Add("/yarn.slice/nm1")
	hs.Add("")
	hs.Add("/")
	if got := hs.Names(); len(got) != 2 || got[0] != "hadoop-yarn" || got[1] != "yarn.slice/nm1" {
		t.Errorf("%q", got)
	}
	for i := range 40 {
		hs.Add("h" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
	}
	if n := len(hs.Names()); n != maxHierarchies {
		t.Errorf("%d hierarchies kept", n)
	}
}
