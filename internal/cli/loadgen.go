package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
)

func loadgenCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fl.SetOutput(stderr)
	url := fl.String("server", "http://localhost:8080", "server URL")
	tokenFile := fl.String("token-file", "", "file holding the ingest token")
	nodes := fl.Int("nodes", 20, "simulated nodes")
	slots := fl.Int("slots", 8, "attempts running at once per node")
	interval := fl.Duration("interval", time.Second, "simulated sampling interval")
	batch := fl.Int("batch-ticks", 5, "ticks per batch")
	dur := fl.Duration("duration", 10*time.Minute, "simulated time to send")
	realtime := fl.Bool("realtime", false, "send at the wall clock, like live agents (default: as fast as the server takes it)")
	conc := fl.Int("concurrency", 8, "requests in flight")
	list := fl.Int("list", 64, "batches a request at most: a sender sends the batches waiting for it together, as a list, as an agent catching up sends its spool (1: one a request)")
	seed := fl.Uint64("seed", 1, "random seed (runs with the same seed send the same data)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	cfg := loadgen.Config{URL: strings.TrimRight(*url, "/"), Nodes: *nodes, Slots: *slots, Interval: *interval,
		BatchTicks: *batch, Duration: *dur, Realtime: *realtime, Concurrency: *conc, Seed: *seed, MaxList: *list}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return err
		}
		cfg.Token = strings.TrimSpace(string(b))
	}
	res, err := loadgen.Run(ctx, cfg)
	fmt.Fprintf(stdout, "batches=%d samples=%d bytes=%d elapsed=%s samples_per_s=%.0f bytes_per_sample_wire=%.2f retries=%d rejected=%d\n",
		res.Batches, res.Samples, res.Bytes, res.Elapsed.Round(time.Millisecond), res.SamplesPerSec(),
		float64(res.Bytes)/max(1, float64(res.Samples)), res.Retries, res.Rejected)
	return err
}
