package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/loadgen"
	"github.com/taskscope/taskscope/internal/minica"
	"github.com/taskscope/taskscope/internal/ship"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// The reliability tests run the real `taskscope server` binary, built once.
var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binError error
)

func TestMain(m *testing.M) {
	var err error
	binDir, err = os.MkdirTemp("", "taskscope-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// taskscope builds the binary the first time a test needs it.
func taskscope(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the taskscope binary")
	}
	binOnce.Do(func() {
		binPath = filepath.Join(binDir, "taskscope")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/taskscope/taskscope/cmd/taskscope")
		out, err := cmd.CombinedOutput()
		if err != nil {
			binError = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binError != nil {
		t.Fatal(binError)
	}
	return binPath
}

// serverProc is a `taskscope server` process.
type serverProc struct {
	cmd    *exec.Cmd
	out    *bytes.Buffer
	mu     *sync.Mutex
	done   chan struct{}
	url    string
	client *http.Client
}

type syncWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// startServer runs `taskscope server` on addr with its data in dir and waits
// until it answers /healthz.
func startServer(t testing.TB, addr, dir string, client *http.Client, scheme string, args ...string) *serverProc {
	t.Helper()
	return startServerBin(t, taskscope(t), addr, dir, client, scheme, args...)
}

// startServerBin is startServer of the binary bin.
func startServerBin(t testing.TB, bin, addr, dir string, client *http.Client, scheme string, args ...string) *serverProc {
	t.Helper()
	args = append([]string{"server", "--listen", addr, "--data-dir", dir, "--log-level", "warn"}, args...)
	cmd := exec.Command(bin, args...)
	p := &serverProc{cmd: cmd, out: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{}), url: scheme + "://" + addr, client: client}
	cmd.Stdout, cmd.Stderr = syncWriter{p.mu, p.out}, syncWriter{p.mu, p.out}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("server output:\n%s", p.output())
		}
	})
	// (A server on a ClickHouse cluster makes its tables ON CLUSTER first.)
	var err error
	exited := false
	if !testsrv.Poll(60*time.Second, func() bool {
		select {
		case <-p.done:
			exited = true
			return true
		default:
		}
		var resp *http.Response
		if resp, err = client.Get(p.url + "/healthz"); err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("server not up after 60 s: %v\n%s", err, p.output())
	}
	if exited {
		t.Fatalf("server exited: %s", p.output())
	}
	return p
}

func (p *serverProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// kill sends SIGKILL and waits for the process to go.
func (p *serverProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop shuts the server down cleanly (SIGTERM).
func (p *serverProc) stop(t testing.TB) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not stop on SIGTERM:\n%s", p.output())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("server exited %d after SIGTERM:\n%s", code, p.output())
	}
}

// expected records what was sent: each process's sample times.
type expected struct {
	mu      sync.Mutex
	times   map[uint64]map[int64]bool
	procs   map[uint64]bool // described, sampled or not
	samples int64
}

func (e *expected) add(b *wire.Batch) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.times == nil {
		e.times, e.procs = map[uint64]map[int64]bool{}, map[uint64]bool{}
	}
	for _, p := range b.Processes {
		e.procs[p.Key] = true
	}
	for _, s := range b.ProcSeries {
		m := e.times[s.Key]
		if m == nil {
			m = map[int64]bool{}
			e.times[s.Key] = m
		}
		for _, ts := range s.Times {
			if m[ts] {
				panic(fmt.Sprintf("loadgen sent process %x at %d twice", s.Key, ts))
			}
			m[ts] = true
			e.samples++
		}
	}
}

// check opens the store in dir (the server has stopped) and asserts that it
// holds every sample sent exactly once (checkStore).
func (e *expected) check(t *testing.T, dir string) {
	t.Helper()
	st, err := duckdb.Open(duckdb.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e.checkStore(t, st)
}

// checkStore asserts that st holds every sample sent exactly once: the
// total, and per process the number of samples and one value in each
// second it was sampled.
func (e *expected) checkStore(t *testing.T, st store.Store) (ok bool) {
	t.Helper()
	failed := t.Failed()
	defer func() { ok = t.Failed() == failed }()
	ctx := context.Background()
	u, err := st.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u.Samples != e.samples {
		t.Errorf("the store holds %d process samples, %d were sent (%+v)", u.Samples, e.samples, u)
	}
	// Per process: the summary's count, and a value in each second sampled.
	seen := map[uint64]int64{}
	for _, a := range storetest.Attempts(t, st) {
		ad, err := st.Attempt(ctx, a.AttemptID)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ad.ProcessList {
			seen[uint64(p.Key)] = p.Samples
		}
	}
	bad := 0
	for key := range e.procs {
		if _, ok := seen[key]; !ok && bad < 5 {
			bad++
			t.Errorf("process %016x was sent, is in no attempt", key)
		}
	}
	for key, times := range e.times {
		if n := seen[key]; n != int64(len(times)) && bad < 5 {
			bad++
			t.Errorf("process %016x: %d samples in its summary, %d sent", key, n, len(times))
		}
	}
	checked := 0
	for key, times := range e.times {
		if checked == 20 {
			break // enough: each costs a query
		}
		checked++
		lo, hi := int64(1<<62), int64(0)
		buckets := map[int64]bool{} // samples are a second apart, give or take the agent's jitter
		for ts := range times {
			lo, hi = min(lo, ts), max(hi, ts)
			buckets[ts-ts%1000] = true
		}
		res, err := st.Series(ctx, store.SeriesQuery{Scope: store.ScopeProcess, Process: store.Key(key), Metrics: []string{"threads"},
			From: lo - lo%1000, To: hi + 1, Step: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for i, ts := range res.Times {
			has := !isNaN(float64(res.Series[0].Values[i]))
			if has != buckets[ts] && bad < 10 {
				bad++
				t.Errorf("process %016x in [%d, +1 s): value %v, sent %v", key, ts, res.Series[0].Values[i], buckets[ts])
			}
		}
	}
	return
}

func isNaN(f float64) bool { return f != f }

// shippers are one shipper per simulated node, each with its spool.
type shippers struct {
	list   []*ship.Shipper
	cancel []context.CancelFunc
	wg     sync.WaitGroup
}

func newShippers(t *testing.T, n int, url string, client *http.Client, spoolRoot, token string) *shippers {
	t.Helper()
	s := &shippers{}
	for i := range n {
		sh, err := ship.New(ship.Config{URLs: []string{url}, Token: token, SpoolDir: filepath.Join(spoolRoot, fmt.Sprint(i)),
			Client: client, MinBackoff: 20 * time.Millisecond, MaxBackoff: 300 * time.Millisecond, Host: fmt.Sprintf("node%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		s.list, s.cancel = append(s.list, sh), append(s.cancel, cancel)
		s.wg.Add(1)
		go func() { defer s.wg.Done(); sh.Run(ctx) }()
	}
	t.Cleanup(s.stop)
	return s
}

func (s *shippers) stop() {
	for _, c := range s.cancel {
		c()
	}
	s.wg.Wait()
}

// totals sums the shippers' retries and the batches answered as
// duplicates; a batch refused or dropped fails the test.
func (s *shippers) totals(t *testing.T) (retries, dups uint64) {
	t.Helper()
	for _, sh := range s.list {
		st := sh.Stats()
		retries, dups = retries+st.Retries, dups+st.Duplicates
		if st.Rejected != 0 || st.DroppedBatches != 0 {
			t.Errorf("shipper stats %+v", st)
		}
	}
	return retries, dups
}

func (s *shippers) sent() (n uint64) {
	for _, sh := range s.list {
		n += sh.Stats().Sent
	}
	return n
}

func (s *shippers) flush(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for i, sh := range s.list {
		if err := sh.Flush(ctx); err != nil {
			t.Fatalf("shipper %d: %v (%+v)", i, err, sh.Stats())
		}
	}
}

// source makes rounds of loadgen batches of nodes nodes (one batch per node
// per round), times on whole seconds. The generator reuses its buffers: a
// round is good until the next one is made (Enqueue encodes it at once).
func source(nodes int) *loadgen.Generator {
	start := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	return loadgen.NewGenerator(loadgen.Config{Nodes: nodes, Slots: 3, BatchTicks: 5, Seed: 11, Start: start})
}

// enqueue hands the next round's batch of node i to shipper i, noting what
// is sent.
func (s *shippers) enqueue(t *testing.T, exp *expected, g *loadgen.Generator) {
	for i, b := range g.Next() {
		exp.add(b)
		if err := s.list[i].Enqueue(b); err != nil {
			t.Fatal(err)
		}
	}
}

var plainClient = &http.Client{Timeout: 10 * time.Second}

// TestServerKilledDuringIngest: the server is killed with SIGKILL twice
// while agents ship, and restarted on the same data directory; the agents
// retry from their spools; in the end the store holds every sample once.
func TestServerKilledDuringIngest(t *testing.T) {
	addr, dir := testsrv.FreeAddr(t), t.TempDir()
	srv := startServer(t, addr, dir, plainClient, "http")
	const nodes, total = 3, 90
	g := source(nodes)
	sh := newShippers(t, nodes, srv.url, plainClient, t.TempDir(), "")
	var exp expected
	next := 0
	feed := func(until int) {
		for ; next < until; next++ {
			sh.enqueue(t, &exp, g)
			time.Sleep(2 * time.Millisecond) // batches spread out, so that the kills find requests in flight
		}
	}
	for kill := 1; kill <= 2; kill++ {
		feed(kill * 30)
		// Kill once some, not all, of what was queued is acknowledged:
		// requests are in flight.
		want := uint64(kill*30*nodes) / 2
		testsrv.WaitUntil(t, "batches acknowledged", 20*time.Second, func() bool { return sh.sent() >= want })
		srv.kill()
		if ok := sh.sent(); ok >= uint64(kill*30*nodes) {
			t.Logf("kill %d came after everything was acknowledged", kill)
		}
		feed(kill*30 + 10) // while the server is down: spooled
		srv = startServer(t, addr, dir, plainClient, "http")
	}
	feed(total)
	sh.flush(t, 25*time.Second)
	retries, dups := sh.totals(t)
	t.Logf("%d batches, %d samples; %d retries, %d answered as duplicates", total*nodes, exp.samples, retries, dups)
	if retries == 0 {
		t.Error("no retries: the kills did not interrupt ingest")
	}
	sh.stop()
	srv.stop(t)
	exp.check(t, dir)
}

// TestShipperRestart: the agent's shipper is stopped mid-way (its context
// cancelled, requests in flight) and a new one takes over its spool: the
// spooled batches go with their first identity and seq, and the store holds
// everything once.
func TestShipperRestart(t *testing.T) {
	addr, dir := testsrv.FreeAddr(t), t.TempDir()
	srv := startServer(t, addr, dir, plainClient, "http")
	const nodes, total = 2, 60
	g := source(nodes)
	spool := t.TempDir()
	var exp expected
	for stage := 0; stage < 3; stage++ {
		sh := newShippers(t, nodes, srv.url, plainClient, spool, "")
		from, to := stage*total/3, (stage+1)*total/3
		for r := from; r < to; r++ {
			sh.enqueue(t, &exp, g)
		}
		if stage < 2 {
			// Stop once part of it is through.
			want := uint64((from + (to-from)/2) * nodes)
			testsrv.WaitUntil(t, "half delivered", 20*time.Second, func() bool { return sh.sent() >= want-uint64(from*nodes) })
			sh.stop()
			var queued int
			for _, s := range sh.list {
				queued += s.Stats().QueuedBatches
			}
			t.Logf("shipper %d stopped with %d batches queued", stage, queued)
			continue
		}
		sh.flush(t, 25*time.Second)
		sh.stop()
	}
	ents, _ := filepath.Glob(filepath.Join(spool, "*", "*.batch"))
	if len(ents) != 0 {
		t.Errorf("%d batches left in the spools", len(ents))
	}
	srv.stop(t)
	exp.check(t, dir)
}

// TestStoreFailure: while the store cannot commit (a full disk), the server
// answers 503, the agents keep their batches in their spools; once the store
// recovers they catch up, and the store holds everything once.
func TestStoreFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("a DuckDB store and shippers")
	}
	dir := t.TempDir()
	st, err := duckdb.Open(duckdb.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Start(Config{Listen: "127.0.0.1:0", Store: st})
	if err != nil {
		t.Fatal(err)
	}
	const nodes, total = 2, 40
	g := source(nodes)
	sh := newShippers(t, nodes, srv.URL(), plainClient, t.TempDir(), "")
	var exp expected
	for r := 0; r < 10; r++ {
		sh.enqueue(t, &exp, g)
	}
	sh.flush(t, 20*time.Second)
	var fail sync.Mutex
	failing := true
	st.SetFault(func() error {
		fail.Lock()
		defer fail.Unlock()
		if failing {
			return errors.New("write taskscope.duckdb.wal: no space left on device")
		}
		return nil
	})
	for r := 10; r < total; r++ {
		sh.enqueue(t, &exp, g)
	}
	testsrv.WaitUntil(t, "retries against the failing store", 20*time.Second, func() bool {
		var retries uint64
		for _, s := range sh.list {
			retries += s.Stats().Retries
		}
		return retries >= 2*nodes
	})
	var spooled int
	for _, s := range sh.list {
		stt := s.Stats()
		spooled += stt.SpooledBatches
		if stt.Rejected != 0 || stt.DroppedBatches != 0 {
			t.Errorf("while the store fails: %+v", stt)
		}
	}
	if spooled != (total-10)*nodes {
		t.Errorf("%d batches spooled while the store fails, want %d", spooled, (total-10)*nodes)
	}
	if sent := sh.sent(); sent != 10*nodes {
		t.Errorf("%d batches acknowledged, want %d (none while the store fails)", sent, 10*nodes)
	}
	fail.Lock()
	failing = false
	fail.Unlock()
	sh.flush(t, 20*time.Second)
	sh.stop()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	exp.check(t, dir)
}

// selfSigned writes a CA and a server certificate for 127.0.0.1 signed by it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	ca, err := minica.New("taskscope test CA")
	if err != nil {
		t.Fatal(err)
	}
	is, err := ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, is.CertPEM, 0o600)
	os.WriteFile(keyFile, is.KeyPEM, 0o600)
	return certFile, keyFile, ca.Pool()
}

// TestTLSAndToken: the server on HTTPS with a token file; the shipper
// trusts the CA and sends the token; a client without the CA, plain HTTP,
// and a wrong token do not get in.
func TestTLSAndToken(t *testing.T) {
	dir := t.TempDir()
	cert, key, pool := selfSigned(t, dir)
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("# agents of rack 1\nold-token\nrack1-token\n"), 0o600)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	addr, data := testsrv.FreeAddr(t), t.TempDir()
	srv := startServer(t, addr, data, client, "https", "--tls-cert", cert, "--tls-key", key, "--ingest-token-file", tokens)

	g := source(1)
	sh := newShippers(t, 1, srv.url, client, t.TempDir(), "rack1-token")
	var exp expected
	for range 10 {
		sh.enqueue(t, &exp, g)
	}
	sh.flush(t, 20*time.Second)

	// Without the CA: the TLS handshake fails.
	if _, err := plainClient.Get(srv.url + "/healthz"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client without the CA: %v", err)
	}
	// Plain HTTP to the TLS port: refused.
	if resp, err := plainClient.Get("http://" + addr + "/healthz"); err == nil {
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS port: %d", resp.StatusCode)
		}
		resp.Body.Close()
	}
	// A wrong token: 401, and the shipper keeps the batch.
	bad := newShippers(t, 1, srv.url, client, t.TempDir(), "rack2-token")
	bad.list[0].Enqueue(g.Next()[0])
	testsrv.WaitUntil(t, "retries with a wrong token", 10*time.Second, func() bool { return bad.list[0].Stats().Retries >= 1 })
	if st := bad.list[0].Stats(); st.Sent != 0 || st.QueuedBatches != 1 || st.Rejected != 0 {
		t.Errorf("with a wrong token: %+v", st)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.url+"/api/v1/ingest", strings.NewReader("x"))
	req.Header.Set("Content-Type", wire.ContentType)
	req.Header.Set("Authorization", "Bearer rack2-token")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "bearer token") {
		t.Errorf("wrong token: %d %s", resp.StatusCode, body)
	}
	bad.stop()
	sh.stop()
	srv.stop(t)
	exp.check(t, data)
}

// TestServerFlags: bad flags and files stop the server with a clear error.
func TestServerFlags(t *testing.T) {
	bin := taskscope(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("# none yet\n"), 0o600)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--ingest-token-file", filepath.Join(dir, "missing")}, "--ingest-token-file: cannot read token file"},
		{[]string{"--ingest-token-file", empty}, "holds no token"},
		{[]string{"--api-token-file", empty}, "--api-token-file: token file " + empty + ": holds no token"},
		{[]string{"--auth-header", "X-Forwarded-User"}, "--auth-header needs --auth-proxy"},
		{[]string{"--auth-header", "X-Forwarded-User", "--auth-proxy", "proxy.example"}, `--auth-proxy: "proxy.example" is not an address`},
		{[]string{"--access-file", empty}, "--access-file needs a login"},
		{[]string{"--redact-pattern", "("}, "--redact-pattern: redaction pattern"},
		{[]string{"--tls-cert", empty}, "--tls-cert and --tls-key go together"},
		{[]string{"--store", "sqlite"}, "--store must be duckdb or clickhouse"},
		{[]string{"--listen", "127.0.0.1:99999"}, "cannot listen"},
	} {
		cmd := exec.Command(bin, append([]string{"server", "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0"}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.msg) {
			t.Errorf("%v: %v, %s; want an error with %q", tc.args, err, out, tc.msg)
		}
	}
}

// TestSecurityHeaders: HTML and JSON answers carry the CSP and their types.
func TestSecurityHeaders(t *testing.T) {
	st, err := duckdb.Open(duckdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := Start(Config{Listen: "127.0.0.1:0", Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	for _, tc := range []struct{ path, ctype string }{
		{"/", "text/html"}, {"/jobs/job_1_1", "text/html"}, {"/api/v1/jobs", "application/json"},
		{"/api/v1/jobs/nope", "application/json"}, {"/healthz", "text/plain"}, {"/metrics", "text/plain"},
	} {
		resp, err := http.Get(srv.URL() + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		h := resp.Header
		if !strings.HasPrefix(h.Get("Content-Type"), tc.ctype) {
			t.Errorf("%s: Content-Type %q, want %s", tc.path, h.Get("Content-Type"), tc.ctype)
		}
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: Content-Security-Policy %q", tc.path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q", tc.path, h.Get("X-Content-Type-Options"))
		}
	}
	// The metrics endpoint exports the ingest counters.
	resp, err := http.Get(srv.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	found := map[string]bool{}
	for sc.Scan() {
		for _, m := range []string{"taskscope_ingest_commit_seconds", "taskscope_store_samples", "taskscope_ingest_queue_batches"} {
			if strings.HasPrefix(sc.Text(), m) {
				found[m] = true
			}
		}
	}
	if len(found) != 3 {
		t.Errorf("metrics: found only %v", found)
	}
}
