package analysis

import (
	"fmt"
	"math"

	"github.com/taskscope/taskscope/internal/store"
)

// shortLivedAttempts are the attempts of a type whose short-lived
// processes shortLived counts: those that started the most processes.
func shortLivedAttempts(atts []store.Attempt) []store.Attempt {
	return top(atts, maxSeriesAttempts, func(a store.Attempt) float64 { return float64(a.Processes) })
}

// shortLivedQuery is the count of an attempt's short-lived processes over
// its life.
func shortLivedQuery(a store.Attempt) store.SeriesQuery {
	return attemptQuery(a, []string{"short_lived"}, 0)
}

// shortLived finds storms of short-lived processes: attempts that start
// processes which live less than one sampling interval (sh -c, sort, awk,
// a subprocess per record), counted by the agent from exit records. Each
// fork and exec costs a few milliseconds of CPU and page faults.
func shortLived(j *Job) []Finding {
	var out []Finding
	byType := j.byType()
	for _, typ := range sortedTypes(byType) {
		type hit struct {
			a      store.Attempt
			n      float64
			perSec float64
		}
		var hits []hit
		var total, secs float64
		for _, a := range shortLivedAttempts(byType[typ]) {
			r, err := j.series(shortLivedQuery(a))
			if err != nil {
				continue
			}
			_, vs := values(r, "short_lived")
			n := 0.0
			for _, v := range vs {
				n = math.Max(n, v)
			}
			d := math.Max(float64(a.DurationMs)/1000, 1)
			total += n
			secs += d
			if n >= 50 {
				hits = append(hits, hit{a, n, n / d})
			}
		}
		if len(hits) == 0 {
			continue
		}
		worst := hits[0]
		ids := []string{}
		for _, h := range hits {
			if h.perSec > worst.perSec {
				worst = h
			}
		}
		sev := grade(worst.perSec, [4]float64{5, 15, 40, 100})
		if sev == None {
			continue
		}
		for _, h := range hits {
			if h.perSec >= 5 {
				ids = append(ids, h.a.AttemptID)
			}
		}
		out = append(out, Finding{Severity: sev, TaskType: typ, AttemptIDs: ids,
			Message: fmt.Sprintf("%s attempts start many processes that live less than a sampling interval: %s started %.0f in %.0f s (%.0f per second); %.0f in all over %d attempts.",
				typ, worst.a.AttemptID, worst.n, float64(worst.a.DurationMs)/1000, worst.perSec, total, len(byType[typ])),
			Recommendation: "The task (usually a Streaming script) runs a command per record or per line. Do the work in the script itself " +
				"(no `sh -c`, `sort`, `awk` per record), or batch records per call.",
			Numbers: []Number{{"short_lived_per_s", worst.perSec, "1/s"}, {"short_lived", worst.n, "count"}, {"short_lived_total", total, "count"},
				{"attempt_seconds", secs, "s"}}})
	}
	return out
}
