package analysis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/store"
)

func TestNormalizeName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"daily-etl 2026-12-01", "daily-etl <date>"},
		{"daily_etl_20261201_0800", "daily_etl_<date>"},
		{"insert overwrite table t partition(dt='2026-12-01T08:00:00Z') (Stage-1)", "insert overwrite table t partition(dt='<date>') (Stage-<n>)"},
		{"sessions 3f2504e0-4f89-11d3-9a0c-0305e82c3301", "sessions <uuid>"},
		{"export-deadbeef1234 part 17", "export-<hex> part <n>"},
		{"s3 copy h2o", "s3 copy h2o"}, // short words with digits are names
		{"wordcount", "wordcount"},
	} {
		if got := analysis.NormalizeName(c.in); got != c.want {
			t.Errorf("NormalizeName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func FuzzNormalizeName(f *testing.F) {
	for _, s := range []string{"daily-etl 2026-12-01", "x 3f2504e0-4f89-11d3-9a0c-0305e82c3301", "a1b2c3d4e5", "<n><date>", "\xff12"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := analysis.NormalizeName(s)
		if analysis.NormalizeName(n) != n {
			t.Errorf("not idempotent: %q -> %q -> %q", s, n, analysis.NormalizeName(n))
		}
		if utf8.ValidString(s) && !utf8.ValidString(n) {
			t.Errorf("%q normalized to invalid UTF-8 %q", s, n)
		}
		if strings.ContainsAny(n, "0123456789") && !strings.ContainsAny(s, "0123456789") {
			t.Errorf("digits appeared: %q -> %q", s, n)
		}
	})
}

// runs builds the daily runs of a recurring job, one a day before t0 (the
// last on t0's day): each of 4 maps of mins minutes (run i's maps take
// mins[i]) doing the same work; other jobs beside them (another name, user or queue) must be
// left out.
func runs(mins ...float64) []*store.JobDetail {
	var out []*store.JobDetail
	for i, m := range mins {
		day := float64(i-len(mins)+1) * 86400
		date := t0.AddDate(0, 0, i-len(mins)+1).Format("2006-01-02")
		mp := task{typ: "map", s: day, d: m * 60, cpu: 0.9 * 20 / m, gcMs: 1000, ioMB: 100} // the same work
		out = append(out, job(100+i, "daily-etl "+date, same(4, mp)...))
		noise := job(200+i, "other "+date, same(4, task{typ: "map", s: day, d: 3 * m * 60, cpu: 0.5})...)
		out = append(out, noise)
		bob := job(300+i, "daily-etl "+date, same(4, task{typ: "map", s: day, d: 3 * m * 60, cpu: 0.5})...)
		bob.User = "bob"
		out = append(out, bob)
	}
	return out
}

// TestRecurring: a daily job whose last run is slower than its band (25 %
// and 5 minutes over the median of its last runs) is a finding, graded
// by how much; within the band, or with too few runs, it is none.
func TestRecurring(t *testing.T) {
	for _, c := range []struct {
		name string
		mins []float64
		want analysis.Severity
	}{
		{"steady", []float64{20, 21, 19, 20, 22, 20}, analysis.None},
		{"20 % slower", []float64{20, 21, 19, 20, 22, 24}, analysis.None},
		{"30 % but 3 minutes slower", []float64{10, 10, 10, 10, 10, 13}, analysis.None},
		{"1.3x and 6 minutes slower", []float64{20, 20, 20, 20, 20, 26}, analysis.Moderate},
		{"1.5x slower", []float64{20, 21, 19, 20, 20, 30}, analysis.Severe},
		{"3x slower", []float64{20, 21, 19, 20, 20, 60}, analysis.Critical},
		{"too few runs", []float64{20, 20, 60}, analysis.None},
	} {
		t.Run(c.name, func(t *testing.T) {
			js := runs(c.mins...)
			cur := js[len(js)-3]
			r := report(t, newFake(js...), cur.JobID)
			got := analysis.None
			if f := finding(r, "recurring"); f != nil {
				got = f.Severity
				base := c.mins[max(0, len(c.mins)-11) : len(c.mins)-1]
				if n := number(f, "baseline_runs"); int(n) != len(base) {
					t.Errorf("baseline of %v runs, want %d", n, len(base))
				}
				if d := number(f, "duration"); d != c.mins[len(c.mins)-1]*60 {
					t.Errorf("duration %v s", d)
				}
				if !strings.Contains(f.Message, `"daily-etl <date>"`) {
					t.Errorf("message %q does not name the recurring job", f.Message)
				}
			}
			if got != c.want {
				t.Errorf("recurring is %s, want %s", got, c.want)
			}
		})
	}
}

// TestHistory: the page of a recurring job: its runs, oldest first, each
// with its measures and what is outside its band.
func TestHistory(t *testing.T) {
	js := runs(20, 21, 19, 20, 22, 20, 30)
	cur := js[len(js)-3]
	h, err := analysis.New(newFake(js...)).History(context.Background(), cur.JobID, 5)
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != "daily-etl <date>" || h.User != "alice" || len(h.Runs) != 5 || h.Baseline != 6 {
		t.Fatalf("history %q of %s: %d runs, baseline %d", h.Name, h.User, len(h.Runs), h.Baseline)
	}
	var got []string
	for _, r := range h.Runs {
		got = append(got, fmt.Sprintf("%s %.0f %v", r.Name[len(r.Name)-5:], r.Duration/60, r.Outside))
	}
	want := []string{"11-27 19 []", "11-28 20 []", "11-29 22 []", "11-30 20 []", "12-01 30 [duration]"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("runs %v, want %v", got, want)
	}
	if b := h.Median[0]; b.Measure != "duration" || b.Median != 20*60 || b.Limit != 25*60+300-300 && b.Limit != 1500 {
		t.Errorf("duration band %+v", b)
	}
}

// TestRecurringRunsKept: a finished run's measures are kept when it is
// analysed: the next runs' analyses compare with it without reading it
// again (only their own job is read).
func TestRecurringRunsKept(t *testing.T) {
	js := runs(20, 21, 19, 20, 22, 30)
	fs := newFake(js...)
	a := analysis.New(fs)
	for i := 0; i < len(js); i += 3 { // alice's runs, oldest first
		before := fs.reads["job"]
		if _, err := a.Report(context.Background(), js[i].JobID); err != nil {
			t.Fatal(err)
		}
		if n := fs.reads["job"] - before; n != 1 {
			t.Errorf("run %d: %d jobs read, want its own alone", i/3, n)
		}
	}
}
