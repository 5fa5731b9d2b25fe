package wire

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValidate(t *testing.T) {
	bad := "bad\xffutf8"
	nul := "nul\x00byte"
	tests := []struct {
		name   string
		mutate func(b *Batch)
		msg    string
	}{
		{"version 0", func(b *Batch) { b.Version = 0 }, "version 0 is not supported (this server reads version 1)"},
		{"version 2", func(b *Batch) { b.Version = 2 }, "version 2 is not supported (this server reads version 1)"},
		{"no agent id", func(b *Batch) { b.AgentID = "" }, "agent_id must be 1 to 256 bytes, is 0"},
		{"long agent id", func(b *Batch) { b.AgentID = strings.Repeat("a", 257) }, "agent_id must be 1 to 256 bytes, is 257"},
		{"seq 0", func(b *Batch) { b.Seq = 0 }, "seq must be at least 1"},
		{"no host", func(b *Batch) { b.Host = "" }, "host must be 1 to 255 bytes, is 0"},
		{"long host", func(b *Batch) { b.Host = strings.Repeat("h", 256) }, "host must be 1 to 255 bytes, is 256"},
		{"agent id not UTF-8", func(b *Batch) { b.AgentID = bad }, `agent_id or host: "bad\xffutf8" is not valid UTF-8`},
		{"host with NUL", func(b *Batch) { b.Host = nul }, `agent_id or host: "nul\x00byte" holds a NUL byte`},
		{"metric name with capitals", func(b *Batch) { b.Metrics[1] = "RSS" }, `metrics[1] "RSS": a metric name is 1 to 64 of [a-z0-9_]`},
		{"empty metric name", func(b *Batch) { b.Metrics[0] = "" }, `metrics[0] "": a metric name is 1 to 64 of [a-z0-9_]`},
		{"long metric name", func(b *Batch) { b.Metrics[0] = strings.Repeat("m", 65) }, `a metric name is 1 to 64 of [a-z0-9_]`},
		{"metric twice", func(b *Batch) { b.Metrics[2] = b.Metrics[0] }, `metrics[2] "cpu_user_ms" is listed twice`},
		{"process without key", func(b *Batch) { b.Processes[1].Key = 0 }, "processes[1]: key and pid are required (key 0, pid 4243)"},
		{"process without pid", func(b *Batch) { b.Processes[0].PID = 0 }, "processes[0]: key and pid are required (key "},
		{"negative pid", func(b *Batch) { b.Processes[0].PID = -4 }, ", pid -4)"},
		{"cmdline not UTF-8", func(b *Batch) { b.Processes[1].Cmdline = bad }, `processes[1] (pid 4243): "bad\xffutf8" is not valid UTF-8`},
		{"comm with NUL", func(b *Batch) { b.Processes[0].Comm = nul }, `processes[0] (pid 4242): "nul\x00byte" holds a NUL byte`},
		{"attempt without id", func(b *Batch) { b.Attempts[0].AttemptID = "" }, "attempts[0]: attempt_id and job_id are required, at most 256 bytes"},
		{"attempt without job", func(b *Batch) { b.Attempts[0].JobID = "" }, "attempts[0]: attempt_id and job_id are required, at most 256 bytes"},
		{"long attempt id", func(b *Batch) { b.Attempts[0].AttemptID = strings.Repeat("a", 257) }, "attempts[0]: attempt_id and job_id are required"},
		{"long job id", func(b *Batch) { b.Attempts[0].JobID = strings.Repeat("j", 257) }, "attempts[0]: attempt_id and job_id are required"},
		{"java opts not UTF-8", func(b *Batch) { b.Attempts[0].JavaOpts = bad }, `attempts[0] (` + exAttempt + `): "bad\xffutf8" is not valid UTF-8`},
		{"membership without process", func(b *Batch) { b.Members[1].Process = 0 }, "memberships[1]: process and attempt_id are required"},
		{"membership without attempt", func(b *Batch) { b.Members[0].AttemptID = "" }, "memberships[0]: process and attempt_id are required"},
		{"membership role with NUL", func(b *Batch) { b.Members[0].Role = nul }, `memberships[0]: "nul\x00byte" holds a NUL byte`},
		{"process series without key", func(b *Batch) { b.ProcSeries[0].Key = 0 }, "process_series[0]: key is required"},
		{"process series attempt not UTF-8", func(b *Batch) { b.ProcSeries[0].AttemptID = bad }, `process_series[0]: attempt_id: "bad\xffutf8" is not valid UTF-8`},
		{"no times", func(b *Batch) { s := &b.ProcSeries[0]; s.Times, s.Columns = nil, nil }, "process_series[0]: no times"},
		{"times go back", func(b *Batch) { b.ProcSeries[0].Times[2] = t0 + 2500 }, "process_series[0]: times must increase: times[2]=1700000002500 after 1700000003000"},
		{"times repeat", func(b *Batch) { b.ProcSeries[0].Times[1] = t0 + 2000 }, "process_series[0]: times must increase: times[1]=1700000002000 after 1700000002000"},
		{"time 0", func(b *Batch) { b.ProcSeries[0].Times[0] = 0 }, "process_series[0]: times[0]=0 is not a unix time in milliseconds"},
		{"metric out of range", func(b *Batch) { b.ProcSeries[0].Columns[1].Metric = 3 }, "process_series[0]: columns[1]: metric 3 is not in the batch's 3 metrics"},
		{"metric twice in a series", func(b *Batch) { b.ProcSeries[0].Columns[1].Metric = 0 }, "process_series[0]: columns[1]: metric 0 appears twice"},
		{"too few values", func(b *Batch) { c := &b.ProcSeries[0].Columns[0]; c.Values = c.Values[:2] }, "process_series[0]: columns[0]: 2 values for 3 times"},
		{"too many values", func(b *Batch) { c := &b.ProcSeries[0].Columns[0]; c.Values = append(c.Values, 1) }, "process_series[0]: columns[0]: 4 values for 3 times"},
		{"bitmap too long", func(b *Batch) { b.ProcSeries[0].Columns[1].Absent = []byte{2, 0} }, "process_series[0]: columns[1]: absent bitmap of 2 bytes for 3 times"},
		{"attempt series without attempt", func(b *Batch) { b.AttemptSeries[0].AttemptID = "" }, "attempt_series[0]: attempt_id is required"},
		{"attempt series attempt with NUL", func(b *Batch) { b.AttemptSeries[0].AttemptID = nul }, `attempt_series[0] (nul` + "\x00" + `byte): attempt_id: "nul\x00byte" holds a NUL byte`},
		{"attempt series times", func(b *Batch) { b.AttemptSeries[0].Times[1] = 1 }, "attempt_series[0] (" + exAttempt + "): times must increase: times[1]=1 after 1700000002000"},
		{"event without kind", func(b *Batch) { b.Events[0].Kind = "" }, "events[0]: kind and time are required"},
		{"profile id with a slash", func(b *Batch) { b.Profiles[0].ID = "a/b" }, `profiles[0] (a/b): id "a/b": a profile id is 1 to 128 of [A-Za-z0-9._:-]`},
		{"profile without attempt", func(b *Batch) { b.Profiles[1].AttemptID = "" }, "profiles[1] (p-2): attempt_id is required, at most 256 bytes"},
		{"profile ends before it starts", func(b *Batch) { b.Profiles[0].EndMs = t0 }, "profiles[0] (p-1): end_ms 1700000000000 before start_ms 1700000002000"},
		{"profile status", func(b *Batch) { b.Profiles[0].Status = "done" }, `profiles[0] (p-1): status "done": one of complete, partial, failed`},
		{"failed profile with stacks", func(b *Batch) { b.Profiles[0].Status = ProfileFailed }, "profiles[0] (p-1): a failed profile has no stacks"},
		{"profile frame out of range", func(b *Batch) { b.Profiles[0].Stacks[0].Frames[1] = 6 }, "profiles[0] (p-1): stacks[0]: frames[1] 6 is not one of the 6 strings"},
		{"profile thread out of range", func(b *Batch) { b.Profiles[0].Stacks[2].Thread = 9 }, "profiles[0] (p-1): stacks[2]: thread 9 is not one of the 6 strings"},
		{"profile thread state", func(b *Batch) { b.Profiles[0].Stacks[1].State = "idle" }, `profiles[0] (p-1): stacks[1]: state "idle" is not a thread state`},
		{"profile negative cpu", func(b *Batch) { b.Profiles[0].Stacks[1].CPUNs = -1 }, "profiles[0] (p-1): stacks[1]: cpu_ns -1, wait_ns 0 and queued_ns 0 must not be negative"},
		{"profile empty string", func(b *Batch) { b.Profiles[0].Strings[2] = "" }, "profiles[0] (p-1): strings[2]: 1 to 4096 bytes, is 0"},
		{"profile frame not UTF-8", func(b *Batch) { b.Profiles[0].Strings[2] = bad }, `profiles[0] (p-1): strings[2]: "bad\xffutf8" is not valid UTF-8`},
		{"profile too deep", func(b *Batch) { b.Profiles[0].Stacks[0].Frames = make([]uint32, 1025) }, "profiles[0] (p-1): stacks[0]: 1025 frames, at most 1024"},
		{"event without time", func(b *Batch) { b.Events[0].Ms = 0 }, "events[0]: kind and time are required"},
		{"time in microseconds", func(b *Batch) { b.ProcSeries[0].Times[2] = 1_700_000_003_000_000 }, "process_series[0]: times[2]=1700000003000000 is not a unix time in milliseconds (after 2100)"},
		{"negative memory", func(b *Batch) { b.Attempts[0].MemoryMB = -1 }, "memory_mb -1, xmx_bytes 859832320 and vcores 0 must not be negative"},
		{"negative vcores", func(b *Batch) { b.Attempts[0].VCores = -2 }, "memory_mb 1024, xmx_bytes 859832320 and vcores -2 must not be negative"},
		{"negative CPU doubt", func(b *Batch) { b.Attempts[0].CPUDoubtMs = -3 }, "attempts[0] (attempt_1700000000000_0042_m_000003_0): cpu_doubt_ms -3 must not be negative"},
		{"negative xmx", func(b *Batch) { b.Attempts[0].XmxBytes = -5 }, "xmx_bytes -5 and vcores 0 must not be negative"},
		{"negative first_ms", func(b *Batch) { b.Attempts[0].FirstMs = -5 }, "first_ms -5 is not a unix time in milliseconds"},
		{"exit status in microseconds", func(b *Batch) { b.Attempts[0].FileExit.Ms = MaxTimeMs * 1000 }, "exit_code_file.ms 4102444800000000 is not a unix time in milliseconds"},
		{"diagnostics not UTF-8", func(b *Batch) { b.Attempts[0].ExitDiagnostics = "\xff" }, "is not valid UTF-8"},
		// Issue 16: a process end of 2^62 ms was stored and answered as a
		// time of year 146140482.
		{"process end 2^62", func(b *Batch) { b.Processes[0].EndMs = 1 << 62 }, "processes[0] (pid 4242): end_ms 4611686018427387904 is not a unix time in milliseconds"},
		{"negative process start", func(b *Batch) { b.Processes[0].StartMs = -1 }, "start_ms -1 is not a unix time in milliseconds"},
		{"sent in microseconds", func(b *Batch) { b.SentMs = 1_700_000_000_000_000 }, "sent_ms 1700000000000000 is not a unix time in milliseconds"},
		{"key start offset beyond btime's second", func(b *Batch) { b.KeyStartOffsetMs = 2001 }, "key_start_offset_ms 2001: must be within ±2000"},
		{"negative cpu base", func(b *Batch) { b.Members[0].CPUBaseMs = -1 }, "memberships[0]: cpu_base_ms -1 must not be negative"},
		{"membership to in nanoseconds", func(b *Batch) { b.Members[0].ToMs = 1_700_000_000_000_000_000 }, "memberships[0]: to_ms 1700000000000000000 is not a unix time in milliseconds"},
		{"event in microseconds", func(b *Batch) { b.Events[0].Ms = 1_700_000_000_000_000 }, "events[0]: ms 1700000000000000 is not a unix time in milliseconds (after 2100)"},
		{"event message not UTF-8", func(b *Batch) { b.Events[0].Message = bad }, `events[0]: "bad\xffutf8" is not valid UTF-8`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := fullBatch()
			tc.mutate(b)
			err := Validate(b)
			if err == nil {
				t.Fatal("valid")
			}
			if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "invalid batch: ") || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q, want ErrInvalid with %q", err, tc.msg)
			}
		})
	}
	// Limits that are allowed exactly.
	b := fullBatch()
	b.AgentID, b.Host = strings.Repeat("a", 256), strings.Repeat("h", 255)
	b.Metrics[0] = strings.Repeat("m", 64)
	b.ProcSeries[0].Columns[1].Absent = []byte{} // empty: none absent
	b.Attempts[0].AttemptID, b.Attempts[0].JobID = strings.Repeat("a", 256), strings.Repeat("j", 256)
	if err := Validate(b); err != nil {
		t.Errorf("at the limits: %v", err)
	}
	// A long bad string is cut in the message.
	b = fullBatch()
	b.Processes[0].Cmdline = strings.Repeat("x", 1000) + "\xff"
	if err := Validate(b); err == nil || len(err.Error()) > 200 {
		t.Errorf("long cmdline: %v", err)
	}
}

// unsanitize undoes SanitizeText, to prove it lossless.
func unsanitize(s string) []byte {
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] == 'x' {
			var v byte
			for _, c := range []byte(s[i+2 : i+4]) {
				switch {
				case c >= '0' && c <= '9':
					v = v<<4 | (c - '0')
				case c >= 'a' && c <= 'f':
					v = v<<4 | (c - 'a' + 10)
				}
			}
			out = append(out, v)
			i += 3
			continue
		}
		out = append(out, s[i])
	}
	return out
}

func TestSanitizeText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"java -Xmx1g org.apache.hadoop.mapred.YarnChild", "java -Xmx1g org.apache.hadoop.mapred.YarnChild"},
		{"ünïcødé ✓ 任务", "ünïcødé ✓ 任务"},
		{"\uFFFD", "\uFFFD"}, // a real replacement character is kept
		{"a\x00b", `a\x00b`},
		{"comm\xff\xfe", `comm\xff\xfe`},
		{"\xc3", `\xc3`},                                            // a cut rune
		{"\xc3(", `\xc3(`},                                          // a bad continuation
		{"\xed\xa0\x80", `\xed\xa0\x80`},                            // a UTF-16 surrogate
		{"\xf4\x90\x80\x80", `\xf4\x90\x80\x80`},                    // beyond U+10FFFF
		{`grep -E '\d+\s' C:\dir\x`, `grep -E '\d+\s' C:\dir\x5cx`}, // backslashes stay unless one could start an escape
		{`\x00` + "\x00", `\x5cx00\x00`},                            // the four characters and the byte differ
		{`\\x`, `\\x5cx`},
		{`\`, `\`},
	}
	for _, tc := range tests {
		got := SanitizeText([]byte(tc.in))
		if got != tc.want {
			t.Errorf("SanitizeText(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 {
			t.Errorf("SanitizeText(%q) = %q: not valid UTF-8 without NUL", tc.in, got)
		}
		if back := string(unsanitize(got)); back != tc.in {
			t.Errorf("SanitizeText(%q) = %q decodes to %q", tc.in, got, back)
		}
	}
	clean := []byte("a clean command line")
	if n := testing.AllocsPerRun(100, func() { _ = SanitizeText(clean) }); n > 1 {
		t.Errorf("SanitizeText of clean text: %v allocs", n)
	}
}
