package procfs

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func fixture(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/proc/" + path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// statLine makes a 52-field /proc/PID/stat line: every field 0 but those given.
func statLine(pid, comm string, fields map[int]string) string {
	parts := []string{pid, "(" + comm + ")"}
	for f := 3; f <= 52; f++ {
		v, ok := fields[f]
		if !ok {
			v = "0"
			if f == 3 {
				v = "S"
			}
		}
		parts = append(parts, v)
	}
	return strings.Join(parts, " ") + "\n"
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Stat // Comm compared as a string
		comm string
	}{
		{"real JVM (14599)", string(fixture(t, "14599/stat")), Stat{PID: 14599, Flags: 4194304, State: 'S', PPID: 14598, PGRP: 14565, Session: 8181,
			MinFlt: 8623, UTime: 1, STime: 4, Threads: 4, StartTime: 617322, VSize: 1256366080, RSS: 8689, StartStack: 140729458823264}, "java"},
		{"real comm with spaces and parentheses (14600)", string(fixture(t, "14600/stat")), Stat{PID: 14600, Flags: 4194304, State: 'S', PPID: 1, PGRP: 14565, Session: 8181,
			MinFlt: 8632, UTime: 2, STime: 6, Threads: 5, StartTime: 617322, VSize: 1256366080, RSS: 8657, StartStack: 140736684316960}, "my (odd) na)me"},
		{"real kernel thread (2)", string(fixture(t, "2/stat")), Stat{PID: 2, Flags: 2129984, State: 'S', Threads: 1, StartTime: 25}, "kthreadd"},
		{"Hadoop 1 Child (4242)", string(fixture(t, "4242/stat")), Stat{PID: 4242, Flags: 1077944384, State: 'S', PPID: 4200, PGRP: 4242, Session: 4242,
			MinFlt: 187236, CMinFlt: 1311, MajFlt: 12, UTime: 5123, STime: 611, CUTime: 17, CSTime: 9, Threads: 63, StartTime: 1234567,
			VSize: 3987456000, RSS: 91234, StartStack: 140722594213664}, "java"},
		{"comm that looks like fields (5005)", string(fixture(t, "5005/stat")), Stat{PID: 5005, Flags: 4194560, State: 'S', PPID: 1, PGRP: 5005, Session: 5005,
			MinFlt: 10, UTime: 3, STime: 1, Threads: 1, StartTime: 999, VSize: 1000000, RSS: 100}, "a) R 1 2 (b"},
		{"older kernel, 44 fields (7007)", string(fixture(t, "7007/stat")), Stat{PID: 7007, Flags: 4194624, State: 'S', PPID: 7000, PGRP: 7000, Session: 7000,
			MinFlt: 3, Threads: 1, StartTime: 888, VSize: 60000000, RSS: 800}, "nginx"},
		{"zombie (8008)", string(fixture(t, "8008/stat")), Stat{PID: 8008, Flags: 4227084, State: 'Z', PPID: 4242, PGRP: 4242, Session: 4242,
			MinFlt: 512, UTime: 14, STime: 3, Threads: 1, StartTime: 1240000}, "python3"},
		{"empty comm", statLine("7", "", map[int]string{4: "1"}), Stat{PID: 7, State: 'S', PPID: 1}, ""},
		{"comm of ')'", statLine("7", ")", nil), Stat{PID: 7, State: 'S'}, ")"},
		{"comm with a newline", statLine("7", "a\nb", nil), Stat{PID: 7, State: 'S'}, "a\nb"},
		{"no trailing newline", strings.TrimSuffix(statLine("9", "x", map[int]string{28: "5"}), "\n"), Stat{PID: 9, State: 'S', StartStack: 5}, "x"},
		{"exactly 24 fields", "9 (x) R 1 1 1 0 -1 0 1 2 3 4 5 6 7 8 20 0 3 0 100 4096 -1", Stat{PID: 9, State: 'R', PPID: 1, PGRP: 1, Session: 1,
			MinFlt: 1, CMinFlt: 2, MajFlt: 3, CMajFlt: 4, UTime: 5, STime: 6, CUTime: 7, CSTime: 8, Threads: 3, StartTime: 100, VSize: 4096, RSS: -1}, "x"},
		{"huge unsigned fields saturate", statLine("9", "x", map[int]string{14: "99999999999999999999", 25: "18446744073709551615"}),
			Stat{PID: 9, State: 'S', UTime: 1<<63 - 1}, "x"},
		{"pid with spaces before comm", "  9  (x) " + strings.Join(strings.Fields(statLine("9", "x", nil))[2:], " "), Stat{PID: 9, State: 'S'}, "x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Stat{StartStack: 12345, CUTime: 99} // stale values must be reset
			if err := ParseStat([]byte(tc.in), &s); err != nil {
				t.Fatal(err)
			}
			if string(s.Comm) != tc.comm {
				t.Errorf("Comm = %q, want %q", s.Comm, tc.comm)
			}
			s.Comm, tc.want.Comm = nil, nil
			if !reflect.DeepEqual(s, tc.want) {
				t.Errorf("ParseStat:\n got %+v\nwant %+v", s, tc.want)
			}
		})
	}
}

func TestParseStatErrors(t *testing.T) {
	tests := []struct{ name, in, msg string }{
		{"empty", "", "no (comm)"},
		{"garbage", "hello world", "no (comm)"},
		{"no close", "12 (java S 1 2 3", "no (comm)"},
		{"no pid", "(java) S 1 2 3", "no (comm)"},
		{"close before open", "12 )java( S", "no (comm)"},
		{"bad pid", "x (java) S 1", "bad pid"},
		{"zero pid", statLine("0", "x", nil), "bad pid"},
		{"negative pid", statLine("-5", "x", nil), "bad pid"},
		{"pid beyond 32 bits", statLine("2147483648", "x", nil), "bad pid"},
		{"cut short (6006)", string(fixture(t, "6006/stat")), "too few fields (12)"},
		{"only comm", "12 (java)", "too few fields (2)"},
		{"not a number", statLine("12", "x", map[int]string{10: "abc"}), `field 10 is "abc"`},
		{"negative utime", statLine("12", "x", map[int]string{14: "-5"}), `field 14 is "-5"`},
		{"ppid beyond 32 bits", statLine("12", "x", map[int]string{4: "4294967296"}), `field 4 is "4294967296"`},
		{"lone minus", statLine("12", "x", map[int]string{8: "-"}), `field 8 is "-"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s Stat
			err := ParseStat([]byte(tc.in), &s)
			if err == nil {
				t.Fatalf("no error; got %+v", s)
			}
			if !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "cannot parse stat") {
				t.Errorf("error %q, want one with %q", err, tc.msg)
			}
		})
	}
	var s Stat
	if err := ParseStat([]byte("12 (x) S 1 2"), &s); !errors.Is(err, errShortStat) {
		t.Errorf("short stat: %v does not wrap errShortStat", err)
	}
}

func TestParseStatus(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Status
	}{
		{"real JVM (14599)", string(fixture(t, "14599/status")), Status{HasUID: true, VoluntaryCtx: 21, InvoluntaryCtx: 14, HasCtx: true, VmHWMBytes: 34896 << 10}},
		{"real kernel thread (2): no VmHWM", string(fixture(t, "2/status")), Status{HasUID: true, VoluntaryCtx: 72, HasCtx: true}},
		{"Hadoop 1 Child (4242)", string(fixture(t, "4242/status")), Status{UID: 1003, HasUID: true, VoluntaryCtx: 80512, InvoluntaryCtx: 1203, HasCtx: true, VmHWMBytes: 401234 << 10}},
		{"uid only", "Uid:\t4294967295\t0\t0\t0\n", Status{UID: 1<<32 - 1, HasUID: true}},
		{"no trailing newline", "Uid:\t7\t7\t7\t7", Status{UID: 7, HasUID: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Status{VmHWMBytes: 1} // reset by the parser
			if err := ParseStatus([]byte(tc.in), &s); err != nil {
				t.Fatal(err)
			}
			if s != tc.want {
				t.Errorf("ParseStatus:\n got %+v\nwant %+v", s, tc.want)
			}
		})
	}
	for _, tc := range []struct{ in, msg string }{
		{"", "no Uid line"},
		{"Name:\tjava\n", "no Uid line"},
		{"Uid:\n", "bad Uid"},
		{"Uid:\t-1\t0\n", "bad Uid"},
		{"Uid:\t4294967296\n", "bad Uid"},
		{"Uid:\t0\nVmHWM:\t  x kB\n", "bad VmHWM"},
		{"Uid:\t0\nVmHWM:\t18014398509481984 kB\n", "bad VmHWM"}, // 2^54 kB overflows 64 bits
		{"Uid:\t0\nvoluntary_ctxt_switches:\t-3\n", "bad voluntary_ctxt_switches"},
		{"Uid:\t0\nnonvoluntary_ctxt_switches:\t\n", "bad nonvoluntary_ctxt_switches"},
	} {
		var s Status
		if err := ParseStatus([]byte(tc.in), &s); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseStatus(%q) = %v, want an error with %q", tc.in, err, tc.msg)
		}
	}
}

func TestParseIO(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want IO
	}{
		{"real (14599)", string(fixture(t, "14599/io")), IO{RChar: 9219}},
		{"busy task", "rchar: 3266214102\nwchar: 1510425990\nsyscr: 4001\nsyscw: 2050\nread_bytes: 1159168\nwrite_bytes: 1507328000\ncancelled_write_bytes: 4096\n",
			IO{RChar: 3266214102, WChar: 1510425990, ReadBytes: 1159168, WriteBytes: 1507328000, CancelledWriteBytes: 4096}},
		{"one field", "write_bytes: 5", IO{WriteBytes: 5}},
		{"max", "rchar: 18446744073709551615\n", IO{RChar: 1<<63 - 1}}, // saturates
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			io := IO{WChar: 1}
			if err := ParseIO([]byte(tc.in), &io); err != nil {
				t.Fatal(err)
			}
			if io != tc.want {
				t.Errorf("ParseIO:\n got %+v\nwant %+v", io, tc.want)
			}
		})
	}
	for _, tc := range []struct{ in, msg string }{
		{"", "no known field"},
		{"syscr: 1\nsyscw: 2\n", "no known field"},
		{"rchar: x\n", "bad rchar"},
		{"rchar: 1\nwrite_bytes: -1\n", "bad write_bytes"},
	} {
		var io IO
		if err := ParseIO([]byte(tc.in), &io); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseIO(%q) = %v, want an error with %q", tc.in, err, tc.msg)
		}
	}
}

func TestParseSchedstat(t *testing.T) {
	tests := []struct {
		in   string
		want Schedstat
	}{
		{string(fixture(t, "14599/schedstat")), Schedstat{RunNs: 28118127, WaitNs: 50830225, Timeslices: 35}},
		{string(fixture(t, "2/schedstat")), Schedstat{RunNs: 5809213, WaitNs: 11689536, Timeslices: 72}},
		{"0 0 0", Schedstat{}},
		{"  1\t2  3 4\n", Schedstat{RunNs: 1, WaitNs: 2, Timeslices: 3}},
	}
	for _, tc := range tests {
		var s Schedstat
		if err := ParseSchedstat([]byte(tc.in), &s); err != nil || s != tc.want {
			t.Errorf("ParseSchedstat(%q) = %+v, %v; want %+v", tc.in, s, err, tc.want)
		}
	}
	for _, in := range []string{"", "1 2", "1 2 x", "-1 2 3", "1 2 3x", "\n"} {
		var s Schedstat
		if err := ParseSchedstat([]byte(in), &s); err == nil || !strings.HasPrefix(err.Error(), "cannot parse schedstat") {
			t.Errorf("ParseSchedstat(%q) = %+v, %v; want an error", in, s, err)
		}
	}
}

func TestParseSmapsRollup(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want SmapsRollup
	}{
		{"real JVM (14599)", string(fixture(t, "14599/smaps_rollup")), SmapsRollup{RSSBytes: 34896 << 10, PSSBytes: 34242 << 10, PSSAnonBytes: 33596 << 10, AnonBytes: 33596 << 10}},
		{"real shell (14598)", string(fixture(t, "14598/smaps_rollup")), SmapsRollup{RSSBytes: 2368 << 10, PSSBytes: 688 << 10, PSSAnonBytes: 543 << 10, AnonBytes: 876 << 10}},
		{"older kernel without Pss_Anon, with swap", "55a4c0e2e000-7ffd5a1f4000 ---p 00000000 00:00 0                  [rollup]\nRss:                 884 kB\nPss:                 201 kB\nAnonymous:            96 kB\nSwap:                 12 kB\n",
			SmapsRollup{RSSBytes: 884 << 10, PSSBytes: 201 << 10, AnonBytes: 96 << 10, SwapBytes: 12 << 10}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := SmapsRollup{SwapBytes: 1}
			if err := ParseSmapsRollup([]byte(tc.in), &s); err != nil {
				t.Fatal(err)
			}
			if s != tc.want {
				t.Errorf("ParseSmapsRollup:\n got %+v\nwant %+v", s, tc.want)
			}
		})
	}
	for _, tc := range []struct{ in, msg string }{
		{"", "no Pss line"},
		{"Rss: 4 kB\n", "no Pss line"},
		{"Rss: 4 kB\nPss: x kB\n", "bad Pss"},
		{"Pss: 1 kB\nSwap: 18014398509481984 kB\n", "bad Swap"},
	} {
		var s SmapsRollup
		if err := ParseSmapsRollup([]byte(tc.in), &s); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseSmapsRollup(%q) = %v, want an error with %q", tc.in, err, tc.msg)
		}
	}
}

func TestSplitCmdline(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"real (14599)", string(fixture(t, "14599/cmdline")), []string{"/tmp/ts/java", "-Djava.net.preferIPv4Stack=true", "-Xmx820m",
			"-Dlog4j.configuration=container-log4j.properties", "-Dyarn.app.container.log.dir=/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005",
			"-Dhadoop.root.logger=INFO,CLA", "org.apache.hadoop.mapred.YarnChild", "10.1.2.3", "39417", "attempt_1700000000000_0042_m_000003_0", "7696581394437"}},
		{"real comm with spaces (14600)", string(fixture(t, "14600/cmdline")), []string{"/tmp/ts/my (odd) na)me"}},
		{"kernel thread: empty", "", nil},
		{"setproctitle with NUL padding (7007)", string(fixture(t, "7007/cmdline")), []string{"nginx: worker process"}},
		{"empty argument in the middle", "a\x00\x00b\x00", []string{"a", "", "b"}},
		{"no trailing NUL", "a\x00b", []string{"a", "b"}},
		{"only NULs", "\x00\x00", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := SplitCmdline([]byte(tc.in), nil)
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
				t.Errorf("SplitCmdline = %q, want %q", got, tc.want)
			}
		})
	}
	if got := SplitCmdline([]byte("b\x00"), []string{"a"}); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("SplitCmdline does not append: %q", got)
	}
}

func TestCgroupPaths(t *testing.T) {
	const c = "container_e07_1700000000000_0042_01_000005"
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"cgroup v1 with YARN's hierarchy", string(fixture(t, "14599/cgroup")), []string{"/", "/", "/", "/system.slice/hadoop-yarn-nodemanager.service",
			"/system.slice/hadoop-yarn-nodemanager.service", "/hadoop-yarn/" + c, "/", "/system.slice/hadoop-yarn-nodemanager.service",
			"/hadoop-yarn/" + c, "/", "/hadoop-yarn/" + c, "/"}},
		{"cgroup v2", string(fixture(t, "14600/cgroup")), []string{"/hadoop-yarn.slice/container_1700000000000_0101_01_000003"}},
		{"hybrid", "1:name=systemd:/user.slice\n0::/user.slice/user-0.slice/session-3.scope\n", []string{"/user.slice", "/user.slice/user-0.slice/session-3.scope"}},
		{"colons in the path", "0::/a:b:c\n", []string{"/a:b:c"}},
		{"malformed lines are skipped", "garbage\n1:cpu\n2:memory:\n\n0::/x", []string{"/x"}},
		{"empty", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := CgroupPaths([]byte(tc.in), nil)
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
				t.Errorf("CgroupPaths = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseBootTime(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{string(fixture(t, "stat")), 1796208480},
		{"cpu  1 2 3\nbtime 1700000000\nprocesses 5\n", 1700000000},
		{"btime 1700000000", 1700000000},
		{"btime  1700000000 \n", 1700000000},
	}
	for _, tc := range tests {
		if got, err := ParseBootTime([]byte(tc.in)); err != nil || got != tc.want {
			t.Errorf("ParseBootTime(%.30q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "cpu 1 2 3\n", "btime\n", "btime x\n", "btime 0\n", "btime -5\n", " btime 17\n", "xbtime 17\n"} {
		if got, err := ParseBootTime([]byte(in)); err == nil {
			t.Errorf("ParseBootTime(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseInt(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"42", 42, true}, {"-42", -42, true}, {"9223372036854775807", 1<<63 - 1, true},
		{"9223372036854775808", 1<<63 - 1, true}, {"-9223372036854775808", -(1<<63 - 1), true},
		{"18446744073709551615", 1<<63 - 1, true}, {"", 0, false}, {"-", 0, false}, {"+1", 0, false}, {"1 ", 0, false}, {"0x1", 0, false},
	}
	for _, tc := range tests {
		if got, ok := parseInt([]byte(tc.in)); got != tc.want || ok != tc.ok {
			t.Errorf("parseInt(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := parseUint([]byte("-1")); ok {
		t.Error("parseUint(-1) ok")
	}
}
