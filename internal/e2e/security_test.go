package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/agent"
	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/report"
	"github.com/taskscope/taskscope/internal/server"
	"github.com/taskscope/taskscope/internal/simulator"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
)

// TestSecretsAndLogins runs two jobs whose java options (in their JVMs'
// command lines, their wrappers' and their job.xml) hold secrets, on a
// server whose reads need a login, with the agent's token bound to its
// host: no secret value is in any answer of the API, in the text report or
// in the agent's spool; each user sees their own jobs and those their
// groups' queues grant; operators see all, hosts included.
func TestSecretsAndLogins(t *testing.T) {
	if testing.Short() {
		t.Skip("runs JVMs on a simulated cluster")
	}
	const host = "e2e-sec"
	tokens := func(lines string, min, max int) *auth.Tokens {
		tok, err := auth.ParseTokens(strings.NewReader(lines), min, max)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	policy, err := auth.ParsePolicy(strings.NewReader("operator op\nqueue etl @etl-team\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), SummaryEvery: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(server.Config{Listen: "127.0.0.1:0", Store: st, Analyzer: analysis.New(st), MaintainEvery: time.Minute,
		Tokens: tokens(auth.Hash("agent-token")+" "+host, 0, 1),
		Auth: auth.New(auth.Options{Policy: policy, Tokens: tokens(
			"op-token op\n"+auth.Hash("alice-token")+" alice\nbob-token bob\ncarol-token carol etl-team\n", 1, 8)})})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, srv: srv, st: st, c: &http.Client{Timeout: 30 * time.Second,
		Transport: auth.Transport("op-token", nil)}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		st.Close()
	})
	c := startCluster(t, simulator.NodeYARN)
	spool := t.TempDir()
	h.startAgent(host, func(cfg *agent.Config) { cfg.Token, cfg.SpoolDir = "agent-token", spool })

	secrets := []string{"E2ESECRET1", "E2ESECRET2", "E2ESECRET3"}
	alice := run(t, c, simulator.JobSpec{Kind: simulator.JobMapReduce, Name: "alice-s3", User: "alice", Maps: 1, NoReduces: true,
		TaskCPU: 300 * time.Millisecond, JavaOpts: "-Dfs.s3a.secret.key=E2ESECRET1 -Djavax.net.ssl.trustStorePassword=E2ESECRET2"})
	bob := run(t, c, simulator.JobSpec{Kind: simulator.JobStreaming, Name: "bob-etl", User: "bob", Queue: "etl", Maps: 1, NoReduces: true,
		TaskCPU: 300 * time.Millisecond, JavaOpts: "-Dspark.authenticate.secret=E2ESECRET3"})
	h.waitJob(alice.JobID, 1)
	h.waitJob(bob.JobID, 1)

	// Everything an operator can read about both jobs.
	var all bytes.Buffer
	read := func(path string) []byte {
		t.Helper()
		b, code := getAs(t, srv.URL(), "op-token", path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, b)
		}
		all.Write(b)
		return b
	}
	read("/api/v1/jobs")
	read("/api/v1/hosts")
	read("/api/v1/hosts/" + host)
	read("/api/v1/events?host=" + host)
	for _, job := range []string{alice.JobID, bob.JobID} {
		var j store.JobDetail
		json.Unmarshal(read("/api/v1/jobs/"+job), &j)
		var r analysis.Report
		json.Unmarshal(read("/api/v1/jobs/"+job+"/findings"), &r)
		read("/api/v1/jobs/" + job + "/events")
		read("/api/v1/jobs/" + job + "/series")
		report.Job(&all, &j, &r)
		for _, a := range j.AttemptList {
			var d store.AttemptDetail
			json.Unmarshal(read("/api/v1/jobs/"+job+"/attempts/"+a.AttemptID), &d)
			read("/api/v1/jobs/" + job + "/attempts/" + a.AttemptID + "/series")
			report.Attempt(&all, &d)
			for _, p := range d.ProcessList {
				read("/api/v1/processes/" + p.Key.String() + "/series?attempt=" + url.QueryEscape(a.AttemptID))
			}
		}
	}
	for _, s := range secrets {
		if bytes.Contains(all.Bytes(), []byte(s)) {
			i := bytes.Index(all.Bytes(), []byte(s))
			t.Errorf("an answer or report holds %s: …%s…", s, all.Bytes()[max(i-120, 0):min(i+40, all.Len())])
		}
	}
	for _, m := range []string{"-Dfs.s3a.secret.key=*****", "-Djavax.net.ssl.trustStorePassword=*****", "-Dspark.authenticate.secret=*****"} {
		if !bytes.Contains(all.Bytes(), []byte(m)) {
			t.Errorf("no answer shows %q (the option's name with its value masked)", m)
		}
	}
	filepath.Walk(spool, func(path string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			b, _ := os.ReadFile(path)
			for _, s := range secrets {
				if bytes.Contains(b, []byte(s)) {
					t.Errorf("spool file %s holds %s", path, s)
				}
			}
		}
		return nil
	})

	// Who sees what. (The agent sees the whole machine: other tests'
	// clusters may have jobs in the lists too.)
	listed := func(token string) map[string]store.Job {
		b, code := getAs(t, srv.URL(), token, "/api/v1/jobs?limit=1000")
		if code != http.StatusOK {
			t.Fatalf("jobs as %s: %d %s", token, code, b)
		}
		var page store.JobPage
		json.Unmarshal(b, &page)
		if page.Total != len(page.Jobs) {
			t.Errorf("jobs as %s: total %d for %d listed", token, page.Total, len(page.Jobs))
		}
		out := map[string]store.Job{}
		for _, j := range page.Jobs {
			out[j.JobID] = j
		}
		return out
	}
	for _, c := range []struct {
		token string
		sees  []string
		not   []string
		may   func(j store.Job) bool
	}{
		{"op-token", []string{alice.JobID, bob.JobID}, nil, func(store.Job) bool { return true }},
		{"alice-token", []string{alice.JobID}, []string{bob.JobID}, func(j store.Job) bool { return j.User == "alice" }},
		{"bob-token", []string{bob.JobID}, []string{alice.JobID}, func(j store.Job) bool { return j.User == "bob" }},
		// carol is in etl-team, which sees queue etl.
		{"carol-token", []string{bob.JobID}, []string{alice.JobID}, func(j store.Job) bool { return j.User == "carol" || j.Queue == "etl" }},
	} {
		jobs := listed(c.token)
		for _, id := range c.sees {
			if _, ok := jobs[id]; !ok {
				t.Errorf("%s does not list %s", c.token, id)
			}
		}
		for id, j := range jobs {
			if !c.may(j) || slices.Contains(c.not, id) {
				t.Errorf("%s lists %s of %s in queue %s", c.token, id, j.User, j.Queue)
			}
		}
		for _, job := range c.not {
			for _, path := range []string{"", "/findings", "/series", "/events"} {
				if b, code := getAs(t, srv.URL(), c.token, "/api/v1/jobs/"+job+path); code != http.StatusNotFound {
					t.Errorf("%s reads %s%s: %d %s", c.token, job, path, code, b)
				}
			}
		}
		for _, job := range c.sees {
			if b, code := getAs(t, srv.URL(), c.token, "/api/v1/jobs/"+job+"/findings"); code != http.StatusOK {
				t.Errorf("%s cannot read the findings of %s: %d %s", c.token, job, code, b)
			}
		}
		wantHosts := http.StatusForbidden
		if c.token == "op-token" {
			wantHosts = http.StatusOK
		}
		if b, code := getAs(t, srv.URL(), c.token, "/api/v1/hosts"); code != wantHosts {
			t.Errorf("%s lists hosts: %d %s", c.token, code, b)
		}
	}
	for _, tok := range []string{"", "wrong-token"} {
		want := map[string]int{"": http.StatusUnauthorized, "wrong-token": http.StatusForbidden}[tok]
		if b, code := getAs(t, srv.URL(), tok, "/api/v1/jobs"); code != want {
			t.Errorf("jobs with token %q: %d %s, want %d", tok, code, b, want)
		}
	}
}

// getAs reads path with token ("" for none).
func getAs(t *testing.T, base, token, path string) ([]byte, int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return b, resp.StatusCode
}
