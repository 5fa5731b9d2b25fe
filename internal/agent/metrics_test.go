package agent

import (
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/taskscope/taskscope/internal/ship"
	"github.com/taskscope/taskscope/internal/tracker"
)

// agentMetricHelp is every metric of the agent's with its help text and
// type, as operators' dashboards and alerts know them (docs/operations.md).
var agentMetricHelp = map[string]struct {
	help string
	typ  dto.MetricType
}{
	"taskscope_agent_tick_seconds":                             {"Time taken by one tick (list, classify, sample).", dto.MetricType_HISTOGRAM},
	"taskscope_agent_ticks_total":                              {"Ticks taken.", dto.MetricType_COUNTER},
	"taskscope_agent_overruns_total":                           {"Ticks skipped because a tick took longer than the interval.", dto.MetricType_COUNTER},
	"taskscope_agent_processes_scanned":                        {"Processes listed in /proc at the last tick.", dto.MetricType_GAUGE},
	"taskscope_agent_processes_tracked":                        {"Task processes sampled at the last tick.", dto.MetricType_GAUGE},
	"taskscope_agent_units":                                    {"Containers and task JVMs being tracked.", dto.MetricType_GAUGE},
	"taskscope_agent_processes_classified_total":               {"New processes looked at.", dto.MetricType_COUNTER},
	"taskscope_agent_processes_attributed_total":               {"Processes attributed to a task attempt.", dto.MetricType_COUNTER},
	"taskscope_agent_short_lived_processes_total":              {"Processes that lived less than one tick, charged from exit records.", dto.MetricType_COUNTER},
	"taskscope_agent_vanished_reads_total":                     {"Reads that failed because the process had just exited.", dto.MetricType_COUNTER},
	"taskscope_agent_idle_samples_total":                       {"Samples of processes that had not run since the last, kept after reading their scheduler runtime only.", dto.MetricType_COUNTER},
	"taskscope_agent_listings_reused_total":                    {"Ticks whose /proc listing was the last one again (no task created or reaped since, by /proc/loadavg).", dto.MetricType_COUNTER},
	"taskscope_agent_exit_records_total":                       {"Taskstats exit records received.", dto.MetricType_COUNTER},
	"taskscope_agent_exit_records_unclaimed_total":             {"Exit records of processes that were no task's, or whose ancestry was lost.", dto.MetricType_COUNTER},
	"taskscope_agent_exit_records_lost_total":                  {"Times the kernel's exit records overflowed the agent's socket (records lost).", dto.MetricType_COUNTER},
	"taskscope_agent_exit_records_dropped_total":               {"Exit records the kernel dropped because the agent's socket was full.", dto.MetricType_COUNTER},
	"taskscope_agent_exits_without_record_total":               {"Task processes that exited without their exit record (dropped): their CPU after their last sample was estimated.", dto.MetricType_COUNTER},
	"taskscope_agent_cpu_split_guesses_total":                  {"Growths of a reaper's CPU of reaped children (the NodeManager's) split between attempts by a guess, an exit record lost: their CPU is told as an estimate (cpu_doubt_ms).", dto.MetricType_COUNTER},
	"taskscope_agent_cpu_standing_guesses_total":               {"Attempts whose CPU holds a guess, an exit record lost, that no reaper's CPU of reaped children settled: told as an estimate (cpu_doubt_ms).", dto.MetricType_COUNTER},
	"taskscope_agent_nodemanager_poll_errors_total":            {"Polls of the node's NodeManager REST API that failed.", dto.MetricType_COUNTER},
	"taskscope_agent_processes_exited_total":                   {"Task processes that exited.", dto.MetricType_COUNTER},
	"taskscope_agent_queue_batches":                            {"Batches waiting for the server (memory and spool).", dto.MetricType_GAUGE},
	"taskscope_agent_queue_bytes":                              {"Compressed bytes waiting for the server.", dto.MetricType_GAUGE},
	"taskscope_agent_spool_batches":                            {"Batches waiting in the spool directory.", dto.MetricType_GAUGE},
	"taskscope_agent_spool_bytes":                              {"Compressed bytes waiting in the spool directory.", dto.MetricType_GAUGE},
	"taskscope_agent_batches_sent_total":                       {"Batches the server acknowledged.", dto.MetricType_COUNTER},
	"taskscope_agent_samples_sent_total":                       {"Process samples the server acknowledged.", dto.MetricType_COUNTER},
	"taskscope_agent_send_retries_total":                       {"Failed deliveries that will be retried.", dto.MetricType_COUNTER},
	"taskscope_agent_batches_rejected_total":                   {"Batches the server refused as invalid.", dto.MetricType_COUNTER},
	"taskscope_agent_dropped_samples_total":                    {"Samples dropped because the queue or spool was full.", dto.MetricType_COUNTER},
	"taskscope_agent_dropped_batches_total":                    {"Batches dropped because the queue or spool was full.", dto.MetricType_COUNTER},
	"taskscope_agent_spool_errors_total":                       {"Batches that could not be written to the spool.", dto.MetricType_COUNTER},
	"taskscope_agent_profiles_running":                         {"JVMs being profiled now (thread dumps).", dto.MetricType_GAUGE},
	"taskscope_agent_profiles_total":                           {"Profiles the server ordered and the agent answered (taken, cut short, failed or refused).", dto.MetricType_COUNTER},
	"taskscope_agent_profile_paused_microseconds_total":        {"Time the JVMs' threads were stopped for the profiles' thread dumps.", dto.MetricType_COUNTER},
	"taskscope_agent_nodemanager_failing":                      {"NodeManagers whose last poll failed, by cause (the agent then goes on with what /proc shows).", dto.MetricType_GAUGE},
	"taskscope_agent_kerberos_logins_total":                    {"Kerberos logins with the agent's keytab (the first, and each renewal of its ticket).", dto.MetricType_COUNTER},
	"taskscope_agent_kerberos_ticket_expiry_timestamp_seconds": {"When the agent's Kerberos ticket expires (Unix time; 0 before a login, and without --nm-keytab).", dto.MetricType_GAUGE},
	"taskscope_agent_read_errors_total":                        {"Reads of optional /proc and job files that failed, by source (vanished processes not counted).", dto.MetricType_COUNTER},
}

// checkExposition parses the agent's /metrics as Prometheus does and checks
// that every metric of the agent's is there once, with its help and type,
// the tick histogram with its buckets, and no metric of the agent's that
// the table above does not know.
func checkExposition(t *testing.T, addr string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	for name, want := range agentMetricHelp {
		f, ok := fams[name]
		if !ok {
			t.Errorf("%s is missing", name)
			continue
		}
		if f.GetHelp() != want.help || f.GetType() != want.typ {
			t.Errorf("%s: help %q type %v, want %q %v", name, f.GetHelp(), f.GetType(), want.help, want.typ)
		}
	}
	for name := range fams {
		if _, ok := agentMetricHelp[name]; !ok && len(name) > len("taskscope_agent_") && name[:len("taskscope_agent_")] == "taskscope_agent_" {
			t.Errorf("%s is not documented in the test's table", name)
		}
	}
	if h := fams["taskscope_agent_tick_seconds"].GetMetric()[0].GetHistogram(); len(h.GetBucket()) != 11 || // 10 bounds and +Inf
		h.GetSampleCount() == 0 {
		t.Errorf("tick histogram: %d buckets, %d observations", len(h.GetBucket()), h.GetSampleCount())
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds", "process_max_fds"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("%s is missing", name)
		}
	}
}

// The counters of the tracker's accuracy are its stats' (an operator's
// alert on lost exit records and the estimates they left reads them).
func TestAccuracyMetrics(t *testing.T) {
	st := tracker.Stats{ExitOverflows: 2, ExitRecordsDropped: 3, ExitsWithoutRecord: 5, SplitGuesses: 7, StandingGuesses: 11}
	want := map[string]uint64{
		"taskscope_agent_exit_records_lost_total":    2,
		"taskscope_agent_exit_records_dropped_total": 3,
		"taskscope_agent_exits_without_record_total": 5,
		"taskscope_agent_cpu_split_guesses_total":    7,
		"taskscope_agent_cpu_standing_guesses_total": 11,
	}
	for _, m := range agentMetrics {
		w, ok := want[m.name]
		if !ok {
			continue
		}
		delete(want, m.name)
		if got := m.value(nil, &st, &ship.Stats{}); got != w {
			t.Errorf("%s = %d, want %d", m.name, got, w)
		}
	}
	for name := range want {
		t.Errorf("%s is missing", name)
	}
}
