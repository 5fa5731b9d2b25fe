package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/duckdb"
)

// TestAPISameOnClickHouse sends the same batches over HTTP to a server on
// the embedded store and to one on ClickHouse, and asks both every route
// of the API: the answers are the same (floats to 1e-9 relative: sums
// over attempts are taken in another order; the findings' evaluation time
// is the wall clock's).
func TestAPISameOnClickHouse(t *testing.T) {
	start := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	const minutes = 8
	// Both stores' clock: a minute after the data ends. Some attempts run
	// (seen within 2 minutes), others ended.
	now := func() time.Time { return start.Add((minutes + 1) * time.Minute) }
	ch := chtest.Start(t)
	cst, err := clickhouse.Open(context.Background(), clickhouse.Options{URL: ch.URL() + "?database=api", InsertEvery: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cst.SetClock(store.Clock{Now: now, StaleAfter: 2 * time.Minute})
	defer cst.Close()
	dst, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), Clock: store.Clock{Now: now, StaleAfter: 2 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	var base []string
	for _, st := range []store.Store{dst, cst} {
		srv, err := Start(Config{Listen: "127.0.0.1:0", Store: st, Analyzer: analysis.New(st), MaintainEvery: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Shutdown(context.Background())
		base = append(base, srv.URL())
	}
	cfg := loadgen.Config{Nodes: 3, Slots: 3, BatchTicks: 5, Seed: 7, Start: start, Duration: minutes * time.Minute}
	bodies := loadgen.Prepare(cfg)
	for _, u := range base {
		c := cfg
		c.URL = u
		res, err := loadgen.SendAll(context.Background(), c, bodies)
		if err != nil || res.Rejected > 0 {
			t.Fatalf("%s: %+v, %v", u, res, err)
		}
		t.Logf("%s: %d batches, %d samples in %s", u, res.Batches, res.Samples, res.Elapsed.Round(time.Millisecond))
	}
	for _, st := range []store.Store{dst, cst} {
		if err := st.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	get := func(u, path string) any {
		t.Helper()
		resp, err := http.Get(u + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		}
		return v
	}
	from, to := start.UnixMilli(), now().UnixMilli()
	window := fmt.Sprintf("from=%d&to=%d", from, to)
	paths := []string{"/api/v1/jobs?limit=1000", "/api/v1/jobs?state=running", "/api/v1/jobs?state=finished&limit=3&offset=1",
		"/api/v1/jobs?user=nobody", "/api/v1/hosts", "/api/v1/events?" + window, "/api/v1/metrics", "/api/v1/jobs/job_0_0",
		"/api/v1/jobs/job_1_0001/attempts/attempt_1_0001_m_000000_0"}
	jobs := get(base[0], "/api/v1/jobs?limit=1000").(map[string]any)["jobs"].([]any)
	if len(jobs) < 3 {
		t.Fatalf("%d jobs: too few to compare", len(jobs))
	}
	for _, h := range get(base[0], "/api/v1/hosts").(map[string]any)["hosts"].([]any) {
		paths = append(paths, "/api/v1/hosts/"+url.PathEscape(h.(map[string]any)["host"].(string))+"?"+window)
	}
	attempts := 0
	for _, j := range jobs {
		id := j.(map[string]any)["job_id"].(string)
		jp := "/api/v1/jobs/" + url.PathEscape(id)
		paths = append(paths, jp, jp+"/series?metrics=cpu_percent,rss_bytes,attempts,read_bytes_per_s&"+window, jp+"/events",
			jp+"/findings", jp+"/series?points=50&"+window)
		detail := get(base[0], jp).(map[string]any)
		for _, a := range detail["attempt_list"].([]any) {
			if attempts >= 40 {
				break
			}
			attempts++
			aid := a.(map[string]any)["attempt_id"].(string)
			ap := jp + "/attempts/" + url.PathEscape(aid)
			paths = append(paths, ap, ap+"/series?metrics=cpu_percent,rss_bytes,short_lived,gc_percent&"+window)
			for _, p := range get(base[0], ap).(map[string]any)["process_list"].([]any) {
				key := p.(map[string]any)["key"].(string)
				paths = append(paths, "/api/v1/processes/"+key+"/series?metrics=cpu_percent,rss_bytes,read_bytes_per_s,threads&"+window,
					"/api/v1/processes/"+key+"/series?attempt="+url.QueryEscape(aid)+"&"+window)
			}
		}
	}
	differ := 0
	for _, p := range paths {
		a, b := get(base[0], p), get(base[1], p)
		if d := diff("", a, b); d != "" {
			differ++
			if differ <= 10 {
				t.Errorf("%s: %s", p, d)
			}
		}
	}
	t.Logf("%d routes compared (%d jobs, %d attempts), %d differ", len(paths), len(jobs), attempts, differ)
}

// diff describes the first difference between two decoded JSON values
// (floats equal to 1e-9 relative; a report's evaluation time ignored).
func diff(path string, a, b any) string {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: %T against %T", path, a, b)
		}
		var keys []string
		for k := range x {
			keys = append(keys, k)
		}
		for k := range y {
			if _, ok := x[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "evaluated" {
				continue
			}
			if d := diff(path+"."+k, x[k], y[k]); d != "" {
				return d
			}
		}
		return ""
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return fmt.Sprintf("%s: %d items against %v", path, len(x), b)
		}
		for i := range x {
			if d := diff(fmt.Sprintf("%s[%d]", path, i), x[i], y[i]); d != "" {
				return d
			}
		}
		return ""
	case float64:
		y, ok := b.(float64)
		if !ok || x != y && math.Abs(x-y) > 1e-9*math.Max(math.Abs(x), math.Abs(y)) {
			return fmt.Sprintf("%s: %v against %v", path, a, b)
		}
		return ""
	}
	if fmt.Sprint(a) != fmt.Sprint(b) {
		return fmt.Sprintf("%s: %v against %v", path, a, b)
	}
	return ""
}
