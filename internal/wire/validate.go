package wire

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrInvalid wraps every validation error.
var ErrInvalid = errors.New("invalid batch")

// MaxTimeMs bounds every time a batch carries (2100-01-01 in unix
// milliseconds): a time beyond it was sent in micro- or nanoseconds.
const MaxTimeMs = 4102444800000

// Validate checks what Unmarshal cannot: the version, required fields, UTF-8,
// and that every series is well formed. The error names the first offending
// record, so that whoever writes an agent can find it.
func Validate(b *Batch) error {
	if err := validate(b); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

func validate(b *Batch) error {
	if b.Version != Version {
		return fmt.Errorf("version %d is not supported (this server reads version %d)", b.Version, Version)
	}
	if b.AgentID == "" || len(b.AgentID) > 256 {
		return fmt.Errorf("agent_id must be 1 to 256 bytes, is %d", len(b.AgentID))
	}
	if b.Seq == 0 {
		return errors.New("seq must be at least 1")
	}
	if b.Host == "" || len(b.Host) > 255 {
		return fmt.Errorf("host must be 1 to 255 bytes, is %d", len(b.Host))
	}
	if err := utf(b.AgentID, b.Host); err != nil {
		return fmt.Errorf("agent_id or host: %v", err)
	}
	if err := times("sent_ms", b.SentMs); err != nil {
		return err
	}
	if b.KeyStartOffsetMs < -MaxKeyStartOffsetMs || b.KeyStartOffsetMs > MaxKeyStartOffsetMs {
		return fmt.Errorf("key_start_offset_ms %d: must be within ±%d", b.KeyStartOffsetMs, MaxKeyStartOffsetMs)
	}
	seen := make(map[string]bool, len(b.Metrics))
	for i, m := range b.Metrics {
		if !validName(m) {
			return fmt.Errorf("metrics[%d] %q: a metric name is 1 to 64 of [a-z0-9_]", i, m)
		}
		if seen[m] {
			return fmt.Errorf("metrics[%d] %q is listed twice", i, m)
		}
		seen[m] = true
	}
	for i := range b.Processes {
		p := &b.Processes[i]
		if p.Key == 0 || p.PID <= 0 {
			return fmt.Errorf("processes[%d]: key and pid are required (key %d, pid %d)", i, p.Key, p.PID)
		}
		if err := times("start_ms", p.StartMs, "end_ms", p.EndMs); err != nil {
			return fmt.Errorf("processes[%d] (pid %d): %v", i, p.PID, err)
		}
		if err := utf(p.Cmdline, p.Comm, p.Role, p.User); err != nil {
			return fmt.Errorf("processes[%d] (pid %d): %v", i, p.PID, err)
		}
	}
	for i := range b.Attempts {
		a := &b.Attempts[i]
		if a.AttemptID == "" || len(a.AttemptID) > 256 || a.JobID == "" || len(a.JobID) > 256 {
			return fmt.Errorf("attempts[%d]: attempt_id and job_id are required, at most 256 bytes", i)
		}
		if a.MemoryMB < 0 || a.XmxBytes < 0 || a.VCores < 0 {
			return fmt.Errorf("attempts[%d] (%s): memory_mb %d, xmx_bytes %d and vcores %d must not be negative", i, a.AttemptID,
				a.MemoryMB, a.XmxBytes, a.VCores)
		}
		if a.CPUDoubtMs < 0 {
			return fmt.Errorf("attempts[%d] (%s): cpu_doubt_ms %d must not be negative", i, a.AttemptID, a.CPUDoubtMs)
		}
		if err := times("first_ms", a.FirstMs, "last_ms", a.LastMs); err != nil {
			return fmt.Errorf("attempts[%d] (%s): %v", i, a.AttemptID, err)
		}
		if err := times("task_jvm_exit.ms", a.JVMExit.Ms, "container_root_exit.ms", a.RootExit.Ms,
			"exit_code_file.ms", a.FileExit.Ms, "nodemanager_exit.ms", a.NMExit.Ms, "task_log.ms", a.TaskLog.Ms); err != nil {
			return fmt.Errorf("attempts[%d] (%s): %v", i, a.AttemptID, err)
		}
		if err := utf(a.AttemptID, a.JobID, a.AppID, a.ContainerID, a.Type, a.Framework, a.JobName, a.User, a.Queue, a.JavaOpts,
			a.ExitDiagnostics); err != nil {
			return fmt.Errorf("attempts[%d] (%s): %v", i, a.AttemptID, err)
		}
	}
	for i := range b.Members {
		m := &b.Members[i]
		if m.Process == 0 || m.AttemptID == "" {
			return fmt.Errorf("memberships[%d]: process and attempt_id are required", i)
		}
		if m.CPUBaseMs < 0 {
			return fmt.Errorf("memberships[%d]: cpu_base_ms %d must not be negative", i, m.CPUBaseMs)
		}
		if err := times("from_ms", m.FromMs, "to_ms", m.ToMs); err != nil {
			return fmt.Errorf("memberships[%d]: %v", i, err)
		}
		if err := utf(m.AttemptID, m.Role); err != nil {
			return fmt.Errorf("memberships[%d]: %v", i, err)
		}
	}
	// The metrics each series has, one bit each (cleared after each).
	has := make([]uint64, (len(b.Metrics)+63)/64)
	for i := range b.ProcSeries {
		s := &b.ProcSeries[i]
		if s.Key == 0 {
			return fmt.Errorf("process_series[%d]: key is required", i)
		}
		if err := validSeries(s, len(b.Metrics), has); err != nil {
			return fmt.Errorf("process_series[%d]: %v", i, err)
		}
	}
	for i := range b.AttemptSeries {
		s := &b.AttemptSeries[i]
		if s.AttemptID == "" {
			return fmt.Errorf("attempt_series[%d]: attempt_id is required", i)
		}
		if err := validSeries(s, len(b.Metrics), has); err != nil {
			return fmt.Errorf("attempt_series[%d] (%s): %v", i, s.AttemptID, err)
		}
	}
	for i := range b.Events {
		e := &b.Events[i]
		if e.Kind == "" || e.Ms <= 0 {
			return fmt.Errorf("events[%d]: kind and time are required", i)
		}
		if e.Ms > MaxTimeMs {
			return fmt.Errorf("events[%d]: ms %d is not a unix time in milliseconds (after 2100)", i, e.Ms)
		}
		if err := utf(e.Kind, e.AttemptID, e.JobID, e.Message); err != nil {
			return fmt.Errorf("events[%d]: %v", i, err)
		}
	}
	for i := range b.Profiles {
		if err := validProfile(&b.Profiles[i]); err != nil {
			return fmt.Errorf("profiles[%d] (%.40s): %v", i, b.Profiles[i].ID, err)
		}
	}
	return nil
}

// validSeries checks a series of a batch of so many metrics; seen is a
// bitset of them, all clear, which it leaves clear if s is valid.
func validSeries(s *Series, metrics int, seen []uint64) error {
	if err := utf(s.AttemptID); err != nil {
		return fmt.Errorf("attempt_id: %v", err)
	}
	if len(s.Times) == 0 {
		return errors.New("no times")
	}
	for j := 1; j < len(s.Times); j++ {
		if s.Times[j] <= s.Times[j-1] {
			return fmt.Errorf("times must increase: times[%d]=%d after %d", j, s.Times[j], s.Times[j-1])
		}
	}
	if s.Times[0] <= 0 {
		return fmt.Errorf("times[0]=%d is not a unix time in milliseconds", s.Times[0])
	}
	if last := s.Times[len(s.Times)-1]; last > MaxTimeMs {
		return fmt.Errorf("times[%d]=%d is not a unix time in milliseconds (after 2100)", len(s.Times)-1, last)
	}
	for k := range s.Columns {
		c := &s.Columns[k]
		if uint64(c.Metric) >= uint64(metrics) {
			return fmt.Errorf("columns[%d]: metric %d is not in the batch's %d metrics", k, c.Metric, metrics)
		}
		w, bit := c.Metric/64, uint64(1)<<(c.Metric%64)
		if seen[w]&bit != 0 {
			return fmt.Errorf("columns[%d]: metric %d appears twice", k, c.Metric)
		}
		seen[w] |= bit
		if len(c.Values) != len(s.Times) {
			return fmt.Errorf("columns[%d]: %d values for %d times", k, len(c.Values), len(s.Times))
		}
		if len(c.Absent) > 0 && len(c.Absent) != (len(s.Times)+7)/8 {
			return fmt.Errorf("columns[%d]: absent bitmap of %d bytes for %d times", k, len(c.Absent), len(s.Times))
		}
	}
	for k := range s.Columns {
		seen[s.Columns[k].Metric/64] = 0
	}
	return nil
}

// times checks optional times (0: unset): none negative or after 2100.
func times(kv ...any) error {
	for i := 0; i < len(kv); i += 2 {
		if v := kv[i+1].(int64); v < 0 || v > MaxTimeMs {
			return fmt.Errorf("%s %d is not a unix time in milliseconds", kv[i], v)
		}
	}
	return nil
}

// ValidMetricName reports whether m is a valid metric name: 1 to 64 of
// [a-z0-9_].
func ValidMetricName(m string) bool { return validName(m) }

func validName(m string) bool {
	if m == "" || len(m) > 64 {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func utf(ss ...string) error {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%.40q is not valid UTF-8", s)
		}
		for i := 0; i < len(s); i++ {
			if s[i] == 0 {
				return fmt.Errorf("%.40q holds a NUL byte", s)
			}
		}
	}
	return nil
}

// SanitizeText makes a byte string from /proc safe to send: invalid UTF-8
// bytes and NULs become \xNN escapes, and the result is valid UTF-8 without
// NULs. It is lossless: a backslash that is followed by 'x' (and so could be
// read as the start of an escape) becomes \x5c; every other byte, backslashes
// included, is kept as it is, so ordinary text passes unchanged. To decode,
// replace each \xNN by the byte 0xNN.
func SanitizeText(b []byte) string {
	if !needsEscape(b) {
		return string(b)
	}
	const hex = "0123456789abcdef"
	out := make([]byte, 0, len(b)+16)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		c := b[0]
		if (r == utf8.RuneError && size <= 1) || c == 0 || c == '\\' && len(b) > 1 && b[1] == 'x' {
			out = append(out, '\\', 'x', hex[c>>4], hex[c&15])
			b = b[1:]
			continue
		}
		out = append(out, b[:size]...)
		b = b[size:]
	}
	return string(out)
}

func needsEscape(b []byte) bool {
	for i, c := range b {
		if c == 0 || c == '\\' && i+1 < len(b) && b[i+1] == 'x' {
			return true
		}
	}
	return !utf8.Valid(b)
}
