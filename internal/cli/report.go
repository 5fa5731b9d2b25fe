package cli

import (
	"context"
	"encoding/json"
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
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: taskscope report [--server URL] [--token-file F] JOB_ID [ATTEMPT_ID]")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() < 1 || fl.NArg() > 2 {
		fl.Usage()
		return fmt.Errorf("give a job id, and optionally an attempt id")
	}
	base := strings.TrimRight(*server, "/") + "/api/v1/jobs/" + url.PathEscape(fl.Arg(0))
	c := &http.Client{Timeout: 30 * time.Second}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("cannot read token: %w", err)
		}
		c.Transport = auth.Transport(strings.TrimSpace(string(b)), nil)
	}
	if fl.NArg() == 2 {
		var d store.AttemptDetail
		if err := getJSON(ctx, c, base+"/attempts/"+url.PathEscape(fl.Arg(1)), &d); err != nil {
			return err
		}
		return report.Attempt(stdout, &d)
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
		return fmt.Errorf("%s: %s: %s", u, resp.Status, e.Error)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
