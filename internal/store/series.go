package store

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/taskscope/taskscope/internal/wire"
)

// Scope is what a series describes.
type Scope string

// Scopes.
const (
	ScopeProcess Scope = "process"
	ScopeAttempt Scope = "attempt"
	ScopeJob     Scope = "job"
)

// SeriesQuery asks for metrics of one process, attempt or job, bucketed.
type SeriesQuery struct {
	Scope Scope
	JobID string
	// AttemptID is the attempt of ScopeAttempt; with ScopeProcess, an
	// attempt the process ran in (optional): the store finds the process
	// through it, and a process that is not in it is ErrNotFound.
	AttemptID string
	Process   Key
	Metrics   []string // names from ProcessSeriesMetrics or AttemptSeriesMetrics
	From, To  int64    // [From, To) in ms
	Step      int64    // bucket width in ms, > 0
}

// SeriesResult holds one value per bucket for each metric. Times are the
// buckets' starts; a bucket without data holds null (NaN).
type SeriesResult struct {
	Scope  Scope          `json:"scope"`
	Step   int64          `json:"step_ms"`
	From   int64          `json:"from_ms"`
	To     int64          `json:"to_ms"`
	Times  []int64        `json:"times"`
	Series []MetricSeries `json:"series"`
}

// MetricSeries is one metric's values.
type MetricSeries struct {
	Metric string  `json:"metric"`
	Unit   string  `json:"unit"`
	Values []Float `json:"values"`
}

// Float marshals NaN as null.
type Float float64

// MarshalJSON implements json.Marshaler.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, v, 'g', 6, 64), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (f *Float) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = Float(math.NaN())
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	*f = Float(v)
	return err
}

// SeriesMetric is a metric that can be asked for. A rate is the sum of a
// counter's increments in a bucket divided by the time they cover, times
// Scale; a gauge is its largest value in the bucket (peaks are kept), times
// Scale. Over a job, each attempt's bucket value is computed first and the
// values are summed.
type SeriesMetric struct {
	Name    string
	Unit    string
	Columns []string // stored columns summed (rates) or the column (gauges)
	Rate    bool
	Scale   float64
	Help    string
	// Ext is the metric an agent sent with no column of its own: the
	// metric is its series (ExtKey, ExtColumns).
	Ext string
}

// ErrUnknownMetric is returned for a metric name that is neither in the
// scope's catalog nor a well-formed name of an agent's metric.
var ErrUnknownMetric = errors.New("unknown metric")

// UnknownMetric is ErrUnknownMetric for a metric name of a scope.
func UnknownMetric(scope Scope, name string) error { return unknownMetric{scope, name} }

type unknownMetric struct {
	scope Scope
	name  string
}

func (e unknownMetric) Error() string        { return fmt.Sprintf("unknown %s metric %q", e.scope, e.name) }
func (e unknownMetric) Is(target error) bool { return target == ErrUnknownMetric }

// extMetric is the series metric of a name outside the catalog: NAME, the
// values of the metric an agent sent under that name (the largest in a
// bucket), or NAME_per_s, their increase per second (for a counter).
func extMetric(name string) (SeriesMetric, bool) {
	if !wire.ValidMetricName(name) {
		return SeriesMetric{}, false
	}
	if base, ok := strings.CutSuffix(name, "_per_s"); ok && wire.ValidMetricName(base) {
		return SeriesMetric{Name: name, Unit: "1/s", Columns: []string{"value"}, Rate: true, Scale: 1000,
			Help: "increase per second of " + base + " (sent by an agent)", Ext: base}, true
	}
	return SeriesMetric{Name: name, Unit: "", Columns: []string{"value"}, Scale: 1,
		Help: name + " (sent by an agent), the largest value in each bucket", Ext: name}, true
}

// ProcessSeriesMetrics are the metrics of a process.
var ProcessSeriesMetrics = []SeriesMetric{
	{"cpu_percent", "percent", []string{"cpu_user_ms", "cpu_sys_ms"}, true, 100, "CPU used, in percent of one core", ""},
	{"cpu_user_percent", "percent", []string{"cpu_user_ms"}, true, 100, "user CPU, percent of one core", ""},
	{"cpu_sys_percent", "percent", []string{"cpu_sys_ms"}, true, 100, "system CPU, percent of one core", ""},
	{"cpu_children_percent", "percent", []string{"cpu_children_user_ms", "cpu_children_sys_ms"}, true, 100, "CPU of reaped children, percent of one core", ""},
	{"rss_bytes", "bytes", []string{"rss_kb"}, false, 1024, "resident set size", ""},
	{"pss_bytes", "bytes", []string{"pss_kb"}, false, 1024, "proportional set size", ""},
	{"vms_bytes", "bytes", []string{"vms_kb"}, false, 1024, "virtual memory", ""},
	{"threads", "count", []string{"threads"}, false, 1, "threads", ""},
	{"fds", "count", []string{"fds"}, false, 1, "open file descriptors", ""},
	{"read_bytes_per_s", "bytes/s", []string{"read_bytes"}, true, 1000, "storage reads", ""},
	{"write_bytes_per_s", "bytes/s", []string{"write_bytes"}, true, 1000, "storage writes", ""},
	{"rchar_per_s", "bytes/s", []string{"rchar"}, true, 1000, "bytes read by read(2) and the like", ""},
	{"wchar_per_s", "bytes/s", []string{"wchar"}, true, 1000, "bytes written by write(2) and the like", ""},
	{"minflt_per_s", "1/s", []string{"minflt"}, true, 1000, "minor page faults", ""},
	{"majflt_per_s", "1/s", []string{"majflt"}, true, 1000, "major page faults", ""},
	{"ctx_voluntary_per_s", "1/s", []string{"ctx_voluntary"}, true, 1000, "voluntary context switches", ""},
	{"ctx_involuntary_per_s", "1/s", []string{"ctx_involuntary"}, true, 1000, "involuntary context switches", ""},
	{"sched_wait_percent", "percent", []string{"sched_wait_ms"}, true, 100, "time runnable but waiting for a CPU", ""},
	{"heap_used_bytes", "bytes", []string{"heap_used_kb"}, false, 1024, "JVM heap used", ""},
	{"heap_committed_bytes", "bytes", []string{"heap_committed_kb"}, false, 1024, "JVM heap committed", ""},
	{"heap_max_bytes", "bytes", []string{"heap_max_kb"}, false, 1024, "JVM heap max", ""},
	{"gc_percent", "percent", []string{"gc_time_ms"}, true, 100, "JVM time in garbage collection", ""},
	{"jvm_threads", "count", []string{"jvm_threads"}, false, 1, "JVM live threads", ""},
}

// AttemptSeriesMetrics are the metrics of an attempt, and (summed over its
// attempts) of a job.
var AttemptSeriesMetrics = []SeriesMetric{
	{"cpu_percent", "percent", []string{"cpu_ms"}, true, 100, "CPU of all the attempt's processes, exited ones included", ""},
	{"rss_bytes", "bytes", []string{"rss_kb"}, false, 1024, "RSS summed over the processes", ""},
	{"pss_bytes", "bytes", []string{"pss_kb"}, false, 1024, "PSS summed over the processes", ""},
	{"vms_bytes", "bytes", []string{"vms_kb"}, false, 1024, "virtual memory summed over the processes", ""},
	{"processes", "count", []string{"processes"}, false, 1, "live processes", ""},
	{"read_bytes_per_s", "bytes/s", []string{"read_bytes"}, true, 1000, "storage reads", ""},
	{"write_bytes_per_s", "bytes/s", []string{"write_bytes"}, true, 1000, "storage writes", ""},
	{"heap_used_bytes", "bytes", []string{"heap_used_kb"}, false, 1024, "JVM heap used", ""},
	{"gc_percent", "percent", []string{"gc_time_ms"}, true, 100, "JVM time in garbage collection", ""},
	{"sched_wait_percent", "percent", []string{"sched_wait_ms"}, true, 100, "time runnable but waiting for a CPU", ""},
	{"short_lived", "count", []string{"short_lived"}, false, 1, "processes that lived less than one sampling interval, so far", ""},
	{"short_lived_per_s", "1/s", []string{"short_lived"}, true, 1000, "processes that lived less than one sampling interval", ""},
}

// JobAttemptsMetric counts, over a job, the attempts with data in each bucket.
const JobAttemptsMetric = "attempts"

// LookupMetrics resolves names for a scope; empty names means the defaults.
func LookupMetrics(scope Scope, names []string) ([]SeriesMetric, error) {
	cat := AttemptSeriesMetrics
	if scope == ScopeProcess {
		cat = ProcessSeriesMetrics
	}
	if len(names) == 0 {
		names = []string{"cpu_percent", "rss_bytes"}
	}
	var out []SeriesMetric
	for _, n := range names {
		if n == JobAttemptsMetric && scope == ScopeJob {
			out = append(out, SeriesMetric{Name: JobAttemptsMetric, Unit: "count", Scale: 1, Help: "attempts with data"})
			continue
		}
		found := false
		for _, m := range cat {
			if m.Name == n {
				out = append(out, m)
				found = true
				break
			}
		}
		if !found {
			// A well-formed name outside the catalogs is an agent's
			// metric: its series, nulls where there is no data of it
			// (whoever sent it, or not). A catalog's name of another
			// scope is unknown here.
			m, ok := extMetric(n)
			if !ok || inCatalog(n) {
				return nil, UnknownMetric(scope, n)
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// inCatalog reports whether name is a metric of a catalog (of any scope).
func inCatalog(name string) bool {
	if name == JobAttemptsMetric {
		return true
	}
	for _, cat := range [][]SeriesMetric{ProcessSeriesMetrics, AttemptSeriesMetrics} {
		for _, m := range cat {
			if m.Name == name {
				return true
			}
		}
	}
	return false
}

// Buckets returns the number of buckets of q.
func (q *SeriesQuery) Buckets() int {
	if q.Step <= 0 || q.To <= q.From {
		return 0
	}
	return int((q.To - q.From + q.Step - 1) / q.Step)
}

// NewSeriesResult makes a result of q's buckets with every value null.
func NewSeriesResult(q *SeriesQuery, metrics []SeriesMetric) *SeriesResult {
	n := q.Buckets()
	r := &SeriesResult{Scope: q.Scope, Step: q.Step, From: q.From, To: q.To, Times: make([]int64, n)}
	for i := range r.Times {
		r.Times[i] = q.From + int64(i)*q.Step
	}
	for _, m := range metrics {
		vals := make([]Float, n)
		for i := range vals {
			vals[i] = Float(math.NaN())
		}
		r.Series = append(r.Series, MetricSeries{Metric: m.Name, Unit: m.Unit, Values: vals})
	}
	return r
}
