package api

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/taskscope/taskscope/internal/store"
)

// stdJSON is what encoding/json writes of v, as the API wrote it before
// writeJSON used github.com/segmentio/encoding/json: HTML escaped, with a
// newline.
func stdJSON(t testing.TB, v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(true)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// written is the body writeJSON writes of v.
func written(t testing.TB, v any) []byte {
	w := httptest.NewRecorder()
	writeJSON(w, http.StatusOK, v)
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json; charset=utf-8" {
		t.Fatalf("%d %q", w.Code, w.Header().Get("Content-Type"))
	}
	return w.Body.Bytes()
}

// tricky are strings that encoders write differently if they can: HTML,
// line and paragraph separators, control bytes, invalid UTF-8, quotes.
var tricky = []string{"", "plain", `<script>alert("x")</script> & 'q'`, "\u2028\u2029", "\x00\x01\x1f\x7f", "\xff\xfe invalid",
	"é 日本 🙂", `back\slash "quoted"`, "tab\tnew\nline\rcr"}

// TestWriteJSONAsEncodingJSON: the API writes the bytes encoding/json
// wrote (the contract of docs/api.md is its output) for every kind of
// value it answers with: jobs with attempts (times, null ends, exit codes,
// maps, floats), attempts with processes and events, series with nulls,
// errors, and the findings' untyped maps.
func TestWriteJSONAsEncodingJSON(t *testing.T) {
	code := int32(-104)
	job := &store.JobDetail{Job: store.Job{JobID: "job_1_1", Name: tricky[2], User: tricky[5], Start: 1700000000123,
		ByType: map[string]int{"map": 3, "reduce": 1, "<x>": 0}, MemGBHours: 1.5e-7, UsedGBHours: 1e21, PeakRSS: math.MaxInt64}}
	for i, s := range tricky {
		a := store.Attempt{AttemptID: "attempt_1_1_m_00000" + string(rune('0'+i)) + "_0", JobID: job.JobID, Host: s, JavaOpts: s,
			ExitDiagnostics: s, Start: store.Time(1700000000000 + int64(i)), End: store.Time(int64(i) * 1e12), RSSByteMs: 1.0 / 3,
			CPUMs: -int64(i), Speculative: i%2 == 0, RetryOf: s}
		if i%2 == 1 {
			a.ExitCode = &code
		}
		job.AttemptList = append(job.AttemptList, a)
	}
	att := &store.AttemptDetail{Attempt: job.AttemptList[2], ProcessList: []store.Process{{Key: 0xdeadbeef, Cmdline: tricky[4],
		Start: -5}, {Key: math.MaxUint64, Comm: tricky[3]}}, Events: []store.Event{{Time: 1, Message: tricky[2], Process: 1}, {}}}
	series := &store.SeriesResult{Scope: store.ScopeAttempt, Step: 1000, Times: []int64{1, 2, 3, 4}, Series: []store.MetricSeries{
		{Metric: "cpu_percent", Unit: "%", Values: []store.Float{1.5, store.Float(math.NaN()), 1e-7, store.Float(math.Inf(1))}},
		{Metric: "rss_bytes", Values: []store.Float{}}}}
	findings := map[string]any{"findings": []any{map[string]any{"z": 1, "a": tricky[2], "n": nil, "f": 0.1 + 0.2,
		"big": 1e300, "small": -1e-300, "list": []string{tricky[1], tricky[6]}}}, "html": tricky[2]}
	for name, v := range map[string]any{"job": job, "attempt": att, "series": series, "error": Error{tricky[2]},
		"findings": findings, "page": store.JobPage{Jobs: []store.Job{job.Job}, Total: 1}, "empty": store.JobPage{},
		"nil": nil} {
		if got, want := written(t, v), stdJSON(t, v); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got  %s\n want %s", name, got, want)
		}
	}
	// A job's answer, written some attempts at a time: of many attempts
	// (written in several pieces), of one, of none, without a list.
	many := *job
	for len(many.AttemptList) < 2000 {
		many.AttemptList = append(many.AttemptList, job.AttemptList...)
	}
	for name, d := range map[string]*store.JobDetail{"job": job, "many": &many,
		"one": {Job: job.Job, AttemptList: job.AttemptList[:1]}, "none": {Job: job.Job, AttemptList: []store.Attempt{}},
		"nil": {Job: job.Job}, "zero": {}} {
		if got, want := jobWritten(t, d), stdJSON(t, d); !bytes.Equal(got, want) {
			t.Errorf("writeJob %s:\n got  %.2000s\n want %.2000s", name, got, want)
		}
	}
}

// jobWritten is the body writeJob writes of d.
func jobWritten(t testing.TB, d *store.JobDetail) []byte {
	w := httptest.NewRecorder()
	writeJob(w, d)
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json; charset=utf-8" ||
		w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	return w.Body.Bytes()
}

// FuzzWriteJSON: for any strings, numbers and times in an attempt, the
// API writes what encoding/json wrote.
func FuzzWriteJSON(f *testing.F) {
	for i, s := range tricky {
		f.Add(s, int64(i)*1e11, float64(i)/7, int32(i-4))
	}
	f.Add("x", int64(math.MaxInt64), math.Inf(-1), int32(math.MinInt32))
	f.Fuzz(func(t *testing.T, s string, n int64, x float64, code int32) {
		a := store.Attempt{AttemptID: s, Host: s + s, Start: store.Time(n), End: store.Time(-n), CPUMs: n, ExitCode: &code,
			Queue: s, JobName: s}
		j := store.Job{JobID: s, MemGBHours: x, ByType: map[string]int{s: int(code), "x" + s: 1}}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			j.MemGBHours = 0 // (neither encoder writes them: an error)
		}
		res := &store.SeriesResult{Times: []int64{n}, Series: []store.MetricSeries{{Metric: s, Values: []store.Float{store.Float(x)}}}}
		for _, v := range []any{a, j, res} {
			if got, want := written(t, v), stdJSON(t, v); !bytes.Equal(got, want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		}
		d := &store.JobDetail{Job: j, AttemptList: []store.Attempt{a, a}}
		if got, want := jobWritten(t, d), stdJSON(t, d); !bytes.Equal(got, want) {
			t.Errorf("writeJob: got  %s\nwant %s", got, want)
		}
	})
}
