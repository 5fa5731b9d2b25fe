package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/taskscope/taskscope/internal/analysis"
	"github.com/taskscope/taskscope/internal/ingest"
	"github.com/taskscope/taskscope/internal/server"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse"
	"github.com/taskscope/taskscope/internal/store/duckdb"
)

// storeFlags are the flags that choose and configure the store.
type storeFlags struct {
	kind, dataDir, clickhouseURL, clickhouseCluster string
	retention, rollupRetention                      time.Duration
}

func (f *storeFlags) register(fl *flag.FlagSet) {
	fl.StringVar(&f.kind, "store", "duckdb", "store: duckdb (embedded) or clickhouse")
	fl.StringVar(&f.dataDir, "data-dir", "./taskscope-data", "directory of the embedded store")
	fl.StringVar(&f.clickhouseURL, "clickhouse-url", "", "ClickHouse URL, http://HOST:8123/?database=NAME (with --store clickhouse)")
	fl.StringVar(&f.clickhouseCluster, "clickhouse-cluster", "", "ClickHouse cluster (of its remote_servers) to make the tables on, replicated and sharded (with --store clickhouse)")
	fl.DurationVar(&f.retention, "retention", 14*24*time.Hour, "how long raw samples are kept (0: forever)")
	fl.DurationVar(&f.rollupRetention, "rollup-retention", 180*24*time.Hour, "how long per-minute rollups and events are kept (0: forever)")
}

func (f *storeFlags) open(log *slog.Logger) (store.Store, error) {
	switch f.kind {
	case "duckdb":
		return duckdb.Open(duckdb.Options{Dir: f.dataDir, Retention: f.retention, RollupRetention: f.rollupRetention, Log: log})
	case "clickhouse":
		if f.clickhouseURL == "" {
			return nil, fmt.Errorf("--store clickhouse needs --clickhouse-url http://HOST:8123/?database=NAME")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // (ON CLUSTER DDL waits for every server)
		defer cancel()
		return clickhouse.Open(ctx, clickhouse.Options{URL: f.clickhouseURL, Cluster: f.clickhouseCluster,
			Retention: f.retention, RollupRetention: f.rollupRetention, Log: log})
	}
	return nil, fmt.Errorf("--store must be duckdb or clickhouse, not %q", f.kind)
}

func serverCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("server", flag.ContinueOnError)
	fl.SetOutput(stderr)
	listen := fl.String("listen", ":8080", "address to serve on")
	tokenFile := fl.String("ingest-token-file", "", "file of accepted agent tokens, one per line (empty: ingest is open)")
	cert := fl.String("tls-cert", "", "TLS certificate file (serves HTTPS with --tls-key)")
	key := fl.String("tls-key", "", "TLS key file")
	logLevel := fl.String("log-level", "info", "debug, info, warn or error")
	maintainEvery := fl.Duration("maintain-every", 30*time.Second, "how often the store compacts, applies retention and checkpoints")
	var sf storeFlags
	sf.register(fl)
	if err := fl.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	if (*cert == "") != (*key == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	var tokens []string
	if *tokenFile != "" {
		if tokens, err = ingest.LoadTokens(*tokenFile); err != nil {
			return err
		}
	}
	st, err := sf.open(log)
	if err != nil {
		return err
	}
	defer st.Close()
	srv, err := server.Start(server.Config{Listen: *listen, Store: st, Tokens: tokens, TLSCert: *cert, TLSKey: *key,
		Analyzer: analysis.New(st), Log: log, MaintainEvery: *maintainEvery})
	if err != nil {
		return err
	}
	where := "data in " + sf.dataDir
	if sf.kind == "clickhouse" {
		where = "data in ClickHouse"
	}
	fmt.Fprintf(stdout, "taskscope server on %s (%s)\n", srv.URL(), where)
	select {
	case <-ctx.Done():
	case err := <-srv.Err():
		if err != nil {
			return err
		}
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
