package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/testsrv"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// checkContract checks a snapshot's JSON against CONTRACT.md: every key it
// names, with its JSON type (extra keys are welcome).
func checkContract(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, raw)
	}
	str := func(where string, m map[string]any, key string) string {
		v, ok := m[key].(string)
		if !ok {
			t.Errorf("%s: %q is %T, want a string", where, key, m[key])
		}
		return v
	}
	num := func(where string, m map[string]any, key string) float64 {
		v, ok := m[key].(float64)
		if !ok {
			t.Errorf("%s: %q is %T, want a number", where, key, m[key])
		}
		return v
	}
	arr := func(where string, m map[string]any, key string) []any {
		v, ok := m[key].([]any)
		if !ok {
			t.Errorf("%s: %q is %T, want an array (never null)", where, key, m[key])
		}
		return v
	}
	rfc3339 := func(where, v string) {
		if _, err := time.Parse(time.RFC3339, v); err != nil {
			t.Errorf("%s: %q is not RFC 3339: %v", where, v, err)
		}
	}
	str("snapshot", s, "host")
	rfc3339("time", str("snapshot", s, "time"))
	arr("snapshot", s, "orphans")
	jobRe := regexp.MustCompile(`^(job|application)_\d+_\d{4,}$`)
	for i, j := range arr("snapshot", s, "jobs") {
		job, _ := j.(map[string]any)
		where := fmt.Sprintf("jobs[%d]", i)
		if id := str(where, job, "job_id"); !jobRe.MatchString(id) {
			t.Errorf("%s: job_id %q", where, id)
		}
		switch fw := str(where, job, "framework"); fw {
		case "mapreduce", "spark", "tez", "unknown":
		default:
			t.Errorf("%s: framework %q", where, fw)
		}
		for k, a := range arr(where, job, "attempts") {
			att, _ := a.(map[string]any)
			where := fmt.Sprintf("%s.attempts[%d]", where, k)
			if id := str(where, att, "attempt_id"); !strings.HasPrefix(id, "attempt_") && !strings.HasPrefix(id, "container_") {
				t.Errorf("%s: attempt_id %q", where, id)
			}
			if c := str(where, att, "container_id"); c != "" && !strings.HasPrefix(c, "container_") {
				t.Errorf("%s: container_id %q", where, c)
			}
			str(where, att, "type")
			for l, p := range arr(where, att, "processes") {
				proc, _ := p.(map[string]any)
				where := fmt.Sprintf("%s.processes[%d]", where, l)
				if num(where, proc, "pid") <= 0 {
					t.Errorf("%s: pid %v", where, proc["pid"])
				}
				num(where, proc, "ppid")
				rfc3339(where+".start_time", str(where, proc, "start_time"))
				str(where, proc, "cmdline")
				if str(where, proc, "role") == "" {
					t.Errorf("%s: no role", where)
				}
				for _, k := range []string{"cpu_user_ms", "cpu_sys_ms", "rss_bytes", "vms_bytes", "threads"} {
					if num(where, proc, k) < 0 {
						t.Errorf("%s: %s %v", where, k, proc[k])
					}
				}
			}
		}
	}
	return s
}

// TestSnapshotFixture takes a snapshot of the fixture node, checks it
// against the contract and against testdata/snapshot.golden.json.
func TestSnapshotFixture(t *testing.T) {
	root := writeNode(t)
	var out, errOut bytes.Buffer
	if code := Main([]string{"snapshot", "--procfs", root, "--json", "--interval", "0", "--host", "node1"}, &out, &errOut); code != 0 {
		t.Fatalf("exit code %d: %s", code, errOut.String())
	}
	s := checkContract(t, out.Bytes())
	jobs := s["jobs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("%d jobs, want 1", len(jobs))
	}
	// The time is the snapshot's: the rest is the fixture's.
	got := regexp.MustCompile(`"time": "[^"]*"`).ReplaceAll(out.Bytes(), []byte(`"time": "T"`))
	path := filepath.Join("testdata", "snapshot.golden.json")
	if *update {
		os.MkdirAll("testdata", 0o755)
		os.WriteFile(path, got, 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("snapshot differs from %s (-update to accept):\n%s", path, got)
	}
	// The text tree names the same.
	out.Reset()
	if code := Main([]string{"snapshot", "--procfs", root, "--interval", "0", "--host", "node1"}, &out, &errOut); code != 0 {
		t.Fatal(errOut.String())
	}
	for _, want := range []string{fxJob + " (mapreduce)", fxAttempt + " map", fxAMC + " am", "task-jvm", "streaming"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text snapshot lacks %q:\n%s", want, out.String())
		}
	}
}

// TestSnapshotLive takes a snapshot of a simulated YARN node running a job.
func TestSnapshotLive(t *testing.T) {
	if testing.Short() {
		t.Skip("starts JVMs")
	}
	started := make(chan simulator.AttemptResult, 16)
	c, err := simulator.Start(context.Background(), simulator.Options{Dir: filepath.Join(t.TempDir(), "sim"), Nodes: 1,
		Kind: simulator.NodeYARN, Notify: func(e simulator.Event) {
			if e.Kind == simulator.EventProcessStarted && e.Process.Type == "map" {
				select {
				case started <- e.Process:
				default:
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j, err := c.Submit(ctx, simulator.JobSpec{Kind: simulator.JobStreaming, Maps: 1, NoReduces: true, TaskCPU: 3 * time.Second,
		StreamCPU: 2 * time.Second, Hold: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var a simulator.AttemptResult
	select {
	case a = <-started:
	case <-ctx.Done():
		t.Fatal("no map started")
	}
	// Snapshots until the JVM's Streaming child is up (it starts a moment
	// after the JVM, later on a loaded machine).
	var out bytes.Buffer
	var found map[string]any
	hasStreaming := func() bool {
		for _, pv := range found["processes"].([]any) {
			if pv.(map[string]any)["role"] == "streaming" {
				return true
			}
		}
		return false
	}
	testsrv.WaitUntil(t, "the attempt and its Streaming child in a snapshot", 40*time.Second, func() bool {
		out.Reset()
		var errOut bytes.Buffer
		if code := Main([]string{"snapshot", "--json", "--interval", "300ms"}, &out, &errOut); code != 0 {
			t.Fatalf("exit code %d: %s", code, errOut.String())
		}
		s := checkContract(t, out.Bytes())
		found = nil
		for _, jv := range s["jobs"].([]any) {
			job := jv.(map[string]any)
			if job["job_id"] != j.ID {
				continue
			}
			for _, av := range job["attempts"].([]any) {
				if att := av.(map[string]any); att["attempt_id"] == a.AttemptID {
					found = att
				}
			}
		}
		return found != nil && hasStreaming()
	})
	if found["container_id"] != a.ContainerID || found["type"] != "map" {
		t.Errorf("attempt %v", found)
	}
	roles := map[string]bool{}
	for _, pv := range found["processes"].([]any) {
		p := pv.(map[string]any)
		roles[p["role"].(string)] = true
		if p["role"] == "task-jvm" {
			if int(p["pid"].(float64)) != a.JVMPID {
				t.Errorf("task-jvm pid %v, the simulator says %d", p["pid"], a.JVMPID)
			}
			if _, ok := p["cpu_percent"]; !ok {
				t.Errorf("no cpu_percent with --interval: %v", p)
			}
		}
	}
	for _, r := range []string{"wrapper", "task-jvm", "streaming"} {
		if !roles[r] {
			t.Errorf("no %s process in %v", r, found["processes"])
		}
	}
	if _, err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}
