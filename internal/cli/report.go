package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/report"
	"github.com/taskscope/taskscope/internal/store"
)

func reportCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("report", flag.ContinueOnError)
	fl.SetOutput(stderr)
	server := fl.String("server", "http://localhost:8080", "server URL")
	tokenFile := fl.String("token-file", "", "file holding an API token (when the server's reads need a login)")
	history := fl.Bool("history", false, "print the runs of JOB_ID's recurring job, each against its band")
	runs := fl.Int("runs", 30, "with --history: the runs to print, at most")
	waste := fl.Bool("waste", false, "print the cost of waste (no JOB_ID): failed, killed, speculative attempts, over-allocation")
	by := fl.String("by", "user", "with --waste: group by user, queue, job or day")
	from := fl.String("from", "-7d", "with --waste: the window's start (unix ms, RFC 3339 or -DURATION)")
	to := fl.String("to", "", "with --waste: the window's end (default now)")
	user := fl.String("user", "", "with --waste: only this user's jobs")
	queue := fl.String("queue", "", "with --waste: only this queue's jobs")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: taskscope report [--server URL] [--token-file F] JOB_ID [ATTEMPT_ID]\n"+
			"       taskscope report [--server URL] --history [--runs N] JOB_ID\n"+
			"       taskscope report [--server URL] --waste [--by user|queue|job|day] [--from T] [--to T] [--user U] [--queue Q]")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return err
	}
	c := &http.Client{Timeout: 60 * time.Second}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("cannot read token: %w", err)
		}
		c.Transport = auth.Transport(strings.TrimSpace(string(b)), nil)
	}
	api := strings.TrimRight(*server, "/") + "/api/v1"
	if *waste {
		if fl.NArg() != 0 {
			fl.Usage()
			return fmt.Errorf("--waste takes no job id")
		}
		q := url.Values{"by": {*by}, "from": {fixDays(*from)}}
		for k, v := range map[string]string{"to": fixDays(*to), "user": *user, "queue": *queue} {
			if v != "" {
				q.Set(k, v)
			}
		}
		var r analysis.WasteReport
		if err := getJSON(ctx, c, api+"/waste?"+q.Encode(), &r); err != nil {
			return err
		}
		return report.Waste(stdout, &r)
	}
	if fl.NArg() < 1 || fl.NArg() > 2 || *history && fl.NArg() != 1 {
		fl.Usage()
		return fmt.Errorf("give a job id, and optionally an attempt id")
	}
	base := api + "/jobs/" + url.PathEscape(fl.Arg(0))
	if *history {
		var h analysis.History
		if err := getJSON(ctx, c, base+"/history?runs="+fmt.Sprint(*runs), &h); err != nil {
			return err
		}
		return report.History(stdout, &h)
	}
	if fl.NArg() == 2 {
		att := base + "/attempts/" + url.PathEscape(fl.Arg(1))
		var d store.AttemptDetail
		if err := getJSON(ctx, c, att, &d); err != nil {
			return err
		}
		if err := report.Attempt(stdout, &d); err != nil {
			return err
		}
		return attemptProfile(ctx, c, att, stdout)
	}
	var j store.JobDetail
	if err := getJSON(ctx, c, base, &j); err != nil {
		return err
	}
	var r analysis.Report
	if err := getJSON(ctx, c, base+"/findings", &r); err != nil {
		return err
	}
	return report.Job(stdout, &j, &r)
}

// attemptProfile prints the hottest frames of the attempt's latest profile
// that has stacks, if it has one (and the server keeps profiles).
func attemptProfile(ctx context.Context, c *http.Client, att string, stdout io.Writer) error {
	var l struct{ Profiles []store.ProfileInfo }
	if err := getJSON(ctx, c, att+"/profiles", &l); err != nil {
		if errors.Is(err, errNotFound) {
			return nil
		}
		return err
	}
	for _, p := range l.Profiles {
		if p.Status != "complete" && p.Status != "partial" {
			continue
		}
		var v report.ProfileData
		if err := getJSON(ctx, c, att+"/profiles/"+url.PathEscape(p.ID), &v); err != nil {
			return err
		}
		report.Profile(stdout, &v, len(l.Profiles)-1)
		return nil
	}
	if len(l.Profiles) > 0 {
		p := l.Profiles[0]
		fmt.Fprintf(stdout, "\nNo profile with stacks: the last, %s, is %s %s\n", p.ID, p.Status, report.Clean(p.Error))
	}
	return nil
}

// errNotFound is a 404 of the API.
var errNotFound = errors.New("not found")

// fixDays turns a -Nd into hours (-7d: -168h), which Go's durations and
// the API's times take.
func fixDays(v string) string {
	if strings.HasPrefix(v, "-") && strings.HasSuffix(v, "d") {
		var n int
		if _, err := fmt.Sscanf(v, "-%dd", &n); err == nil && fmt.Sprintf("-%dd", n) == v {
			return fmt.Sprintf("-%dh", 24*n)
		}
	}
	return v
}

func getJSON(ctx context.Context, c *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
		err := fmt.Errorf("%s: %s: %s", u, resp.Status, e.Error)
		if resp.StatusCode == http.StatusNotFound {
			err = fmt.Errorf("%w: %w", errNotFound, err)
		}
		return err
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
