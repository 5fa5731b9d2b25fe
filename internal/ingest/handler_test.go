package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/duckdb"
	"github.com/taskscope/taskscope/internal/store/storetest"
	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

const token = "s3cret-token"

// rig is a handler and pipeline over a real DuckDB store in a temporary
// directory, served by httptest.
type rig struct {
	st  *duckdb.Store
	gs  *gatedStore
	p   *Pipeline
	h   *Handler
	srv *httptest.Server
}

type rigOptions struct {
	handler  HandlerOptions
	pipeline PipelineOptions
	// unprepared hides the store's store.BatchPreparer from the pipeline
	// (a backend that prepares nothing ahead).
	unprepared bool
}

// unprepared is a store without its capabilities: only store.Store.
type unprepared struct{ store.Store }

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	st, err := duckdb.Open(duckdb.Options{Dir: t.TempDir(), SummaryEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	gs := &gatedStore{Store: st}
	var ps store.Store = gs
	if o.unprepared {
		ps = unprepared{gs}
	}
	p := NewPipeline(ps, o.pipeline)
	if o.handler.Tokens == nil {
		o.handler.Tokens = tokens(t, "another-token\n"+token)
	}
	h := NewHandler(p, o.handler)
	srv := httptest.NewServer(h)
	r := &rig{st: st, gs: gs, p: p, h: h, srv: srv}
	t.Cleanup(func() {
		gs.open()
		srv.Close()
		p.Close()
		st.Close()
	})
	return r
}

// gatedStore can hold the writer in Begin (to fill the queue), and fail the
// append of batches from one host after the real appender took them.
type gatedStore struct {
	store.Store
	mu       sync.Mutex
	gate     chan struct{} // non-nil: Begin waits until it is closed
	entered  chan struct{} // signalled when Begin starts waiting
	poison   string        // host whose batches fail to append
	failures int
	// Batches appended prepared (store.PreparedAppender) and not.
	prepared, plain int
}

func (g *gatedStore) hold() (entered chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate, g.entered = make(chan struct{}), make(chan struct{}, 16)
	return g.entered
}

func (g *gatedStore) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

func (g *gatedStore) Begin(ctx context.Context) (store.Appender, error) {
	g.mu.Lock()
	gate, entered := g.gate, g.entered
	g.mu.Unlock()
	if gate != nil {
		entered <- struct{}{}
		<-gate
	}
	app, err := g.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &gatedAppender{Appender: app, g: g}, nil
}

// AgentSeq passes the store's capability on.
func (g *gatedStore) AgentSeq(ctx context.Context, agent string) (uint64, error) {
	return g.Store.(store.SeqReader).AgentSeq(ctx, agent)
}

type gatedAppender struct {
	store.Appender
	g *gatedStore
}

// Prepare passes the store's capability on (store.BatchPreparer): the
// pipeline prepares batches, and appends them prepared.
func (g *gatedStore) Prepare(b *wire.Batch) *store.Prepared {
	return g.Store.(store.BatchPreparer).Prepare(b)
}

func (a *gatedAppender) AppendPrepared(p *store.Prepared) (bool, error) {
	dup, err := a.Appender.(store.PreparedAppender).AppendPrepared(p)
	return a.poisoned(p.Batch, true, dup, err)
}

func (a *gatedAppender) Append(b *wire.Batch) (bool, error) {
	dup, err := a.Appender.Append(b)
	return a.poisoned(b, false, dup, err)
}

// poisoned counts the append of b, and fails it if it comes from the
// poisoned host.
func (a *gatedAppender) poisoned(b *wire.Batch, prepared, dup bool, err error) (bool, error) {
	a.g.mu.Lock()
	defer a.g.mu.Unlock()
	if prepared {
		a.g.prepared++
	} else {
		a.g.plain++
	}
	if err == nil && a.g.poison != "" && b.Host == a.g.poison {
		a.g.failures++
		return false, fmt.Errorf("injected failure for host %s", b.Host)
	}
	return dup, err
}

// batch makes a valid batch of agent/seq: one attempt with two processes,
// 5 samples each.
func batch(agent string, seq uint64, host string) *wire.Batch {
	g := &storetest.Gen{Agent: agent, Host: host}
	start := storetest.T0.Add(time.Duration(seq) * time.Hour)
	a := &storetest.AttemptSpec{ID: fmt.Sprintf("attempt_1700000000000_%04d_m_000000_0", seq), JobID: fmt.Sprintf("job_1700000000000_%04d", seq),
		Type: "map", JobName: "wordcount", User: "alice", Queue: "default", MemoryMB: 1024, Start: start,
		Procs: []storetest.ProcSpec{{PID: 100, Role: wire.RoleTaskJVM, CPUPerS: 500, RSS: 64 << 20}, {PID: 101, Role: wire.RoleChild, CPUPerS: 10, RSS: 1 << 20}}}
	b := g.Batch([]*storetest.AttemptSpec{a}, 0, 5, false)
	b.Seq = seq
	b.SentMs = start.UnixMilli()
	return b
}

func zstdBytes(t testing.TB, b []byte) []byte {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

func gzipBytes(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type answer struct {
	code   int
	header http.Header
	reply  reply
	raw    string
}

// post sends body with the usual headers, changed by hdr ("" deletes one).
func (r *rig) post(t testing.TB, body io.Reader, hdr map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+"/api/v1/ingest", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", wire.ContentType)
	req.Header.Set("Content-Encoding", "zstd")
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := r.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("answer %d has Content-Type %q: %s", a.code, ct, raw)
	}
	if err := json.Unmarshal(raw, &a.reply); err != nil {
		t.Errorf("answer %d is not JSON: %v: %q", a.code, err, raw)
	}
	return a
}

func (r *rig) send(t testing.TB, b *wire.Batch) answer {
	t.Helper()
	return r.post(t, bytes.NewReader(zstdBytes(t, wire.Marshal(nil, b))), nil)
}

// samples is what the store holds.
func (r *rig) samples(t testing.TB) store.Usage {
	t.Helper()
	u, err := r.st.Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestHandlerRejects(t *testing.T) {
	r := newRig(t, rigOptions{handler: HandlerOptions{MaxBodyBytes: 64 << 10, MaxDecodedBytes: 1 << 20}})
	good := wire.Marshal(nil, batch("agent-a", 1, "node1"))
	zgood := zstdBytes(t, good)

	// A zip bomb: 64 MiB of zeros in a few KiB.
	zeros := make([]byte, 64<<20)
	zbomb := zstdBytes(t, zeros)
	gbomb := gzipBytes(t, zeros)
	if len(zbomb) > 64<<10 || len(gbomb) > 64<<10 {
		t.Fatalf("bombs of %d and %d bytes do not pass the compressed limit", len(zbomb), len(gbomb))
	}
	// A bomb in a valid batch: a process whose command line is 2 MiB (the
	// decompressed limit comes before the string limit).
	big := batch("agent-a", 2, "node1")
	big.Processes[0].Cmdline = strings.Repeat("x", 2<<20)
	zbig := zstdBytes(t, wire.Marshal(nil, big))

	// Wrong types: seq (field 3, varint) sent as a string; a process's pid
	// (field 2 of field 7) sent as fixed64.
	seqAsString := protowire.AppendTag(append([]byte(nil), good...), 3, protowire.BytesType)
	seqAsString = protowire.AppendString(seqAsString, "7")
	var proc []byte
	proc = protowire.AppendTag(proc, 2, protowire.Fixed64Type)
	proc = protowire.AppendFixed64(proc, 42)
	pidAsFixed := protowire.AppendTag(append([]byte(nil), good...), 7, protowire.BytesType)
	pidAsFixed = protowire.AppendBytes(pidAsFixed, proc)

	invalid := func(mut func(b *wire.Batch)) []byte {
		b := batch("agent-a", 3, "node1")
		mut(b)
		return zstdBytes(t, wire.Marshal(nil, b))
	}
	tests := []struct {
		name   string
		body   []byte
		hdr    map[string]string
		method string
		code   int
		msg    string // in the error
	}{
		{"GET", nil, nil, http.MethodGet, http.StatusMethodNotAllowed, "ingest takes POST"},
		{"no token", zgood, map[string]string{"Authorization": ""}, "", http.StatusUnauthorized, "missing or wrong bearer token"},
		{"wrong token", zgood, map[string]string{"Authorization": "Bearer s3cret-tokeN"}, "", http.StatusUnauthorized, "bearer token"},
		{"token prefix", zgood, map[string]string{"Authorization": "Bearer s3cret"}, "", http.StatusUnauthorized, "bearer token"},
		{"token longer", zgood, map[string]string{"Authorization": "Bearer " + token + "x"}, "", http.StatusUnauthorized, "bearer token"},
		{"basic auth", zgood, map[string]string{"Authorization": "Basic " + token}, "", http.StatusUnauthorized, "bearer token"},
		{"empty bearer", zgood, map[string]string{"Authorization": "Bearer "}, "", http.StatusUnauthorized, "bearer token"},
		{"no content type", zgood, map[string]string{"Content-Type": ""}, "", http.StatusUnsupportedMediaType, "Content-Type must be application/x-taskscope-batch"},
		{"JSON", []byte(`{"version":1}`), map[string]string{"Content-Type": "application/json", "Content-Encoding": ""}, "", http.StatusUnsupportedMediaType, "Content-Type must be"},
		{"bad media type", zgood, map[string]string{"Content-Type": "application/x-taskscope-batch; ="}, "", http.StatusUnsupportedMediaType, "Content-Type must be"},
		{"brotli", zgood, map[string]string{"Content-Encoding": "br"}, "", http.StatusUnsupportedMediaType, `unsupported Content-Encoding "br"`},
		{"too large", make([]byte, 64<<10+1), nil, "", http.StatusRequestEntityTooLarge, "exceeds the limit of 65536"},
		{"too large chunked", make([]byte, 64<<10+1), map[string]string{"X-Chunked": "1"}, "", http.StatusRequestEntityTooLarge, "exceeds the limit of 65536 bytes"},
		{"zstd bomb", zbomb, nil, "", http.StatusRequestEntityTooLarge, "decompressed body too large: limit 1048576 bytes"},
		{"gzip bomb", gbomb, map[string]string{"Content-Encoding": "gzip"}, "", http.StatusRequestEntityTooLarge, "decompressed body too large"},
		{"batch over the decoded limit", zbig, nil, "", http.StatusRequestEntityTooLarge, "decompressed body too large"},
		{"zstd garbage", []byte("not zstd at all"), nil, "", http.StatusBadRequest, "cannot decompress zstd body"},
		{"zstd truncated", zgood[:len(zgood)/2], nil, "", http.StatusBadRequest, "cannot decompress zstd body"},
		{"gzip truncated", gzipBytes(t, good)[:40], map[string]string{"Content-Encoding": "gzip"}, "", http.StatusBadRequest, "cannot decompress gzip body"},
		{"gzip of nothing", []byte{0x1f}, map[string]string{"Content-Encoding": "gzip"}, "", http.StatusBadRequest, "cannot decompress gzip body"},
		{"truncated protobuf", good[:len(good)-3], map[string]string{"Content-Encoding": "identity"}, "", http.StatusBadRequest, "malformed batch"},
		{"garbage protobuf", zstdBytes(t, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), nil, "", http.StatusBadRequest, "malformed batch"},
		{"empty body", nil, map[string]string{"Content-Encoding": ""}, "", http.StatusUnprocessableEntity, "version 0 is not supported"},
		{"seq as string", seqAsString, map[string]string{"Content-Encoding": "identity"}, "", http.StatusUnprocessableEntity, "field 3: wrong wire type 2, want 0"},
		{"pid as fixed64", pidAsFixed, map[string]string{"Content-Encoding": "identity"}, "", http.StatusUnprocessableEntity, "field 7: field 2: wrong wire type 1, want 0"},
		{"version 2", invalid(func(b *wire.Batch) { b.Version = 2 }), nil, "", http.StatusUnprocessableEntity, "version 2 is not supported (this server reads version 1)"},
		{"seq 0", invalid(func(b *wire.Batch) { b.Seq = 0 }), nil, "", http.StatusUnprocessableEntity, "seq must be at least 1"},
		{"no host", invalid(func(b *wire.Batch) { b.Host = "" }), nil, "", http.StatusUnprocessableEntity, "host must be 1 to 255 bytes"},
		{"negative pid", invalid(func(b *wire.Batch) { b.Processes[0].PID = -1 }), nil, "", http.StatusUnprocessableEntity, "processes[0]: key and pid are required"},
		{"negative time", invalid(func(b *wire.Batch) { b.ProcSeries[0].Times[0] = -1000 }), nil, "", http.StatusUnprocessableEntity, "process_series[0]: times[0]=-1000 is not a unix time in milliseconds"},
		{"time in microseconds", invalid(func(b *wire.Batch) {
			for i := range b.ProcSeries[1].Times {
				b.ProcSeries[1].Times[i] *= 1000
			}
		}), nil, "", http.StatusUnprocessableEntity, "process_series[1]: times[4]="},
		{"negative memory", invalid(func(b *wire.Batch) { b.Attempts[0].MemoryMB = -2048 }), nil, "", http.StatusUnprocessableEntity, "memory_mb -2048"},
		{"unknown metric index", invalid(func(b *wire.Batch) { b.ProcSeries[0].Columns[0].Metric = 99 }), nil, "", http.StatusUnprocessableEntity, "process_series[0]: columns[0]: metric 99 is not in the batch's"},
		{"metric name", invalid(func(b *wire.Batch) { b.Metrics[0] = "CPU; DROP TABLE jobs" }), nil, "", http.StatusUnprocessableEntity, `metrics[0] "CPU; DROP TABLE jobs": a metric name is 1 to 64 of [a-z0-9_]`},
		{"values short", invalid(func(b *wire.Batch) { b.ProcSeries[0].Columns[2].Values = b.ProcSeries[0].Columns[2].Values[:1] }), nil, "", http.StatusUnprocessableEntity, "columns[2]: 1 values for 5 times"},
		{"invalid UTF-8", invalid(func(b *wire.Batch) { b.Attempts[0].JobName = "\xff\xfe" }), nil, "", http.StatusUnprocessableEntity, "is not valid UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = bytes.NewReader(tc.body)
			if tc.hdr["X-Chunked"] != "" {
				body = io.MultiReader(bytes.NewReader(tc.body)) // no length known: chunked
			}
			var a answer
			if tc.method != "" {
				req, _ := http.NewRequest(tc.method, r.srv.URL+"/api/v1/ingest", nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				a = answer{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
				json.Unmarshal(raw, &a.reply)
			} else {
				a = r.post(t, body, tc.hdr)
			}
			if a.code != tc.code || a.reply.Status != "error" || !strings.Contains(a.reply.Error, tc.msg) {
				t.Errorf("answer %d %s, want %d with %q", a.code, a.raw, tc.code, tc.msg)
			}
			if a.code == http.StatusUnauthorized && a.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if a.code == http.StatusMethodNotAllowed && a.header.Get("Allow") != "POST" {
				t.Error("405 without Allow: POST")
			}
		})
	}
	if u := r.samples(t); u.Samples != 0 || u.Processes != 0 || u.Attempts != 0 {
		t.Errorf("after refused batches the store holds %+v", u)
	}
	// The server still takes a good batch, with every encoding and either token.
	for i, c := range []struct {
		enc   string
		body  []byte
		token string
	}{{"zstd", zgood, token}, {"gzip", gzipBytes(t, wire.Marshal(nil, batch("agent-a", 2, "node1"))), "another-token"},
		{"", wire.Marshal(nil, batch("agent-a", 3, "node1")), token}} {
		a := r.post(t, bytes.NewReader(c.body), map[string]string{"Content-Encoding": c.enc, "Authorization": "bearer " + c.token})
		if a.code != http.StatusOK || a.reply.Status != "stored" || a.reply.Samples != 10 {
			t.Errorf("good batch %d (%q): %d %s", i, c.enc, a.code, a.raw)
		}
	}
	if u := r.samples(t); u.Samples != 30 {
		t.Errorf("store holds %d samples, want 30", u.Samples)
	}
}

// TestHandlerNoTokens: without tokens, ingest is open.
func TestHandlerNoTokens(t *testing.T) {
	r := newRig(t, rigOptions{handler: HandlerOptions{Tokens: &auth.Tokens{}}})
	a := r.post(t, bytes.NewReader(zstdBytes(t, wire.Marshal(nil, batch("a", 1, "n")))), map[string]string{"Authorization": ""})
	if a.code != http.StatusOK {
		t.Errorf("open ingest: %d %s", a.code, a.raw)
	}
}

// tokens are the tokens of a token file's lines.
func tokens(t testing.TB, lines string) *auth.Tokens {
	t.Helper()
	tok, err := auth.ParseTokens(strings.NewReader(lines), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestHandlerDuplicate: a batch sent again, or an older seq of the same
// agent, is acknowledged and stored once.
func TestHandlerDuplicate(t *testing.T) {
	r := newRig(t, rigOptions{})
	b1, b2 := batch("agent-d", 1, "node1"), batch("agent-d", 2, "node1")
	for i, want := range []string{"stored", "duplicate"} {
		a := r.send(t, b1)
		if a.code != http.StatusOK || a.reply.Status != want {
			t.Fatalf("send %d: %d %s, want %s", i, a.code, a.raw, want)
		}
		if (a.header.Get("X-Taskscope-Duplicate") == "true") != (want == "duplicate") {
			t.Errorf("send %d: X-Taskscope-Duplicate %q", i, a.header.Get("X-Taskscope-Duplicate"))
		}
	}
	if a := r.send(t, b2); a.reply.Status != "stored" {
		t.Fatalf("seq 2: %s", a.raw)
	}
	if a := r.send(t, b1); a.reply.Status != "duplicate" {
		t.Fatalf("seq 1 after 2: %s", a.raw)
	}
	// Another agent with the same seq is not a duplicate.
	if a := r.send(t, batch("agent-e", 1, "node2")); a.reply.Status != "stored" {
		t.Fatalf("other agent: %s", a.raw)
	}
	if u := r.samples(t); u.Samples != 30 {
		t.Errorf("store holds %d samples, want 30 (3 batches of 10)", u.Samples)
	}
}

// TestHandlerStoreFailure: when the store cannot commit, the answer is 503
// with Retry-After, nothing is stored, and the agent's sequence does not
// move: the retry is stored (not taken for a duplicate).
func TestHandlerStoreFailure(t *testing.T) {
	r := newRig(t, rigOptions{})
	if a := r.send(t, batch("agent-f", 1, "node1")); a.code != http.StatusOK {
		t.Fatalf("first batch: %s", a.raw)
	}
	r.st.SetFault(func() error { return errors.New("no space left on device") })
	b := batch("agent-f", 2, "node1")
	for i := 0; i < 2; i++ {
		a := r.send(t, b)
		if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || !strings.Contains(a.reply.Error, "no space left on device") {
			t.Fatalf("with a failing store: %d %v %s", a.code, a.header, a.raw)
		}
	}
	if u := r.samples(t); u.Samples != 10 || u.Attempts != 1 {
		t.Errorf("after failed commits the store holds %+v, want the first batch only", u)
	}
	r.st.SetFault(nil)
	if a := r.send(t, b); a.code != http.StatusOK || a.reply.Status != "stored" {
		t.Fatalf("retry after the store recovered: %d %s (a duplicate would be a lost batch)", a.code, a.raw)
	}
	if u := r.samples(t); u.Samples != 20 || u.Attempts != 2 {
		t.Errorf("after the retry the store holds %+v", u)
	}
}

// TestPipelineBadBatchInGroup: batches queued while the writer is busy are
// committed as one group; when one of them fails, the group is rolled back
// and the others are written alone: they are stored once, the failing one
// not at all (not half).
func TestPipelineBadBatchInGroup(t *testing.T) {
	// With a store that prepares batches ahead (DuckDB), and with one that
	// does not: the pipeline appends each as its store takes it.
	for _, unprepared := range []bool{false, true} {
		t.Run(fmt.Sprintf("unprepared=%v", unprepared), func(t *testing.T) {
			r := newRig(t, rigOptions{unprepared: unprepared})
			testBadBatchInGroup(t, r)
			r.gs.mu.Lock()
			defer r.gs.mu.Unlock()
			if unprepared && (r.gs.prepared > 0 || r.gs.plain == 0) || !unprepared && (r.gs.plain > 0 || r.gs.prepared == 0) {
				t.Errorf("appended %d batches prepared, %d not", r.gs.prepared, r.gs.plain)
			}
		})
	}
}

func testBadBatchInGroup(t *testing.T, r *rig) {
	entered := r.gs.hold()
	r.gs.mu.Lock()
	r.gs.poison = "poisoned"
	r.gs.mu.Unlock()
	type res struct {
		host string
		a    answer
	}
	out := make(chan res, 8)
	send := func(b *wire.Batch) {
		go func() { out <- res{b.Host, r.send(t, b)} }()
	}
	send(batch("agent-g0", 1, "node0")) // the writer takes it and waits in Begin
	<-entered
	hosts := []string{"node1", "poisoned", "node2", "node3"}
	for i, h := range hosts {
		send(batch(fmt.Sprintf("agent-g%d", i+1), uint64(i+2), h)) // seqs apart: attempts apart
	}
	testsrv.WaitUntil(t, "4 batches queued", 10*time.Second, func() bool { return len(r.p.q) == 4 })
	r.gs.open()
	for range 5 {
		x := <-out
		want := http.StatusOK
		if x.host == "poisoned" {
			want = http.StatusServiceUnavailable
		}
		if x.a.code != want {
			t.Errorf("%s: %d %s, want %d", x.host, x.a.code, x.a.raw, want)
		}
	}
	r.gs.mu.Lock()
	failures := r.gs.failures
	r.gs.mu.Unlock()
	if failures != 2 {
		t.Errorf("the poisoned batch was appended %d times, want 2 (in the group, then alone)", failures)
	}
	if u := r.samples(t); u.Samples != 40 || u.Attempts != 4 {
		t.Errorf("store holds %+v, want 4 batches of 10 samples", u)
	}
	hs, err := r.st.Hosts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.Host == "poisoned" {
			t.Errorf("the failed batch's host is in the store: %+v", h)
		}
	}
}

// TestPipelineDiskFullGroup: when a group fails because the disk is full,
// every batch of it is answered 503 at once (writing them one by one would
// fail each again), the handler says the disk is full, and OnError hears of
// each failed commit with the number of batches it refused.
func TestPipelineDiskFullGroup(t *testing.T) {
	var mu sync.Mutex
	var refused []int
	r := newRig(t, rigOptions{pipeline: PipelineOptions{OnError: func(err error, n int) {
		mu.Lock()
		defer mu.Unlock()
		refused = append(refused, n)
	}}})
	entered := r.gs.hold()
	r.st.SetFault(func() error {
		return errors.New(`Failed to commit: Could not write file "taskscope.duckdb.wal": No space left on device`)
	})
	out := make(chan answer, 8)
	send := func(b *wire.Batch) { go func() { out <- r.send(t, b) }() }
	send(batch("agent-d0", 1, "node0")) // the writer takes it and waits in Begin
	<-entered
	for i := range 4 {
		send(batch(fmt.Sprintf("agent-d%d", i+1), 1, fmt.Sprintf("node%d", i+1)))
	}
	testsrv.WaitUntil(t, "4 batches queued", 10*time.Second, func() bool { return len(r.p.q) == 4 })
	r.gs.open()
	for range 5 {
		a := <-out
		if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || !strings.Contains(a.reply.Error, "disk is full") {
			t.Errorf("a batch on a full disk: %d %v %s", a.code, a.header, a.raw)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refused) != 2 || refused[0] != 1 || refused[1] != 4 {
		t.Errorf("failed commits refused %v batches, want [1 4]: the group of 4 failed once, not batch by batch", refused)
	}
	if u := r.samples(t); u.Samples != 0 {
		t.Errorf("the store holds %+v after a full disk", u)
	}
}

// TestHandlerBackPressure: with the writer busy and the queue full, a
// request is refused at once with 503 and Retry-After; and no request is
// answered 2xx before its batch is committed.
func TestHandlerBackPressure(t *testing.T) {
	r := newRig(t, rigOptions{pipeline: PipelineOptions{QueueLen: 1}})
	entered := r.gs.hold()
	out := make(chan answer, 2)
	go func() { out <- r.send(t, batch("agent-b", 1, "node1")) }()
	<-entered
	go func() { out <- r.send(t, batch("agent-b", 2, "node1")) }()
	testsrv.WaitUntil(t, "a batch queued", 10*time.Second, func() bool { return len(r.p.q) == 1 })
	start := time.Now()
	a := r.send(t, batch("agent-b", 3, "node1"))
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "1" || !strings.Contains(a.reply.Error, "busy") {
		t.Errorf("with a full queue: %d %v %s", a.code, a.header, a.raw)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the busy answer took %s", d)
	}
	select {
	case a := <-out:
		t.Fatalf("answered %d %s before the commit", a.code, a.raw)
	case <-time.After(200 * time.Millisecond):
	}
	if u := r.samples(t); u.Samples != 0 {
		t.Errorf("%d samples stored while the writer waits", u.Samples)
	}
	r.gs.open()
	for range 2 {
		if a := <-out; a.code != http.StatusOK || a.reply.Status != "stored" {
			t.Errorf("after the writer went on: %d %s", a.code, a.raw)
		}
	}
	// The refused batch, retried, is stored.
	if a := r.send(t, batch("agent-b", 3, "node1")); a.reply.Status != "stored" {
		t.Errorf("retry of the refused batch: %s", a.raw)
	}
	if u := r.samples(t); u.Samples != 30 {
		t.Errorf("store holds %d samples, want 30", u.Samples)
	}
}

// TestHandlerSamplesBound: the queue is also bounded in samples.
func TestHandlerSamplesBound(t *testing.T) {
	r := newRig(t, rigOptions{pipeline: PipelineOptions{QueueSamples: 15}})
	entered := r.gs.hold()
	out := make(chan answer, 1)
	go func() { out <- r.send(t, batch("agent-s", 1, "node1")) }()
	<-entered
	// 10 samples are still counted as queued while the writer holds them.
	a := r.send(t, batch("agent-s", 2, "node1"))
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" {
		t.Errorf("over the samples bound: %d %s", a.code, a.raw)
	}
	r.gs.open()
	if a := <-out; a.code != http.StatusOK {
		t.Errorf("first batch: %d %s", a.code, a.raw)
	}
}

// TestHandlerTimeout: a request whose commit does not come in time is
// answered 503 (the agent retries); if the batch is stored after all, the
// retry is a duplicate, and it is stored once.
func TestHandlerTimeout(t *testing.T) {
	r := newRig(t, rigOptions{handler: HandlerOptions{Timeout: 200 * time.Millisecond}})
	entered := r.gs.hold()
	b := batch("agent-t", 1, "node1")
	out := make(chan answer, 1)
	go func() { out <- r.send(t, b) }()
	<-entered
	a := <-out
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" {
		t.Errorf("commit too slow: %d %s", a.code, a.raw)
	}
	r.gs.open()
	testsrv.WaitUntil(t, "the batch committed", 10*time.Second, func() bool { return r.samples(t).Samples == 10 })
	if a := r.send(t, b); a.code != http.StatusOK || a.reply.Status != "duplicate" {
		t.Errorf("retry: %d %s", a.code, a.raw)
	}
	if u := r.samples(t); u.Samples != 10 {
		t.Errorf("store holds %d samples, want 10", u.Samples)
	}
}

// TestHandlerHostileText: command lines with markup, quotes and escapes are
// stored as they were sent.
func TestHandlerHostileText(t *testing.T) {
	r := newRig(t, rigOptions{})
	b := batch("agent-h", 1, "node1")
	evil := `python -c "print('</script><script>alert(1)</script>')" ` + "\u2028 \\x00 ' OR 1=1 --"
	b.Processes[0].Cmdline = evil
	b.Attempts[0].JobName = `<img src=x onerror=alert(1)>`
	if a := r.send(t, b); a.code != http.StatusOK {
		t.Fatalf("%d %s", a.code, a.raw)
	}
	d, err := r.st.Attempt(context.Background(), b.Attempts[0].AttemptID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range d.ProcessList {
		found = found || p.Cmdline == evil
	}
	if !found || d.JobName != b.Attempts[0].JobName {
		t.Errorf("stored attempt %+v does not hold the text as sent", d)
	}
}

// FuzzHandler posts arbitrary bodies, as sent or compressed, under every
// encoding: the handler never panics and never fails (no 5xx: a body is
// refused with a 4xx or stored), a refused body leaves the store as it was,
// and the store keeps answering.
//
//	go test -run '^$' -fuzz FuzzHandler -fuzztime 1m -fuzzminimizetime 2s ./internal/ingest/
func FuzzHandler(f *testing.F) {
	r := newRig(f, rigOptions{handler: HandlerOptions{MaxBodyBytes: 1 << 20, MaxDecodedBytes: 4 << 20,
		Limits: wire.Limits{MaxStringBytes: 4 << 10, MaxMetrics: 64, MaxRecords: 1 << 12, MaxPoints: 1 << 16}}})
	good := wire.Marshal(nil, batch("fuzz-seed", 1, "node1"))
	for enc := range byte(5) {
		f.Add(good, enc)
	}
	f.Add(good[:len(good)/2], byte(0))
	f.Add(zstdBytes(f, good), byte(3))
	f.Add(gzipBytes(f, good), byte(4))
	f.Add(zstdBytes(f, good)[:20], byte(3))
	f.Add([]byte{0x52, 0x04, 0x1a, 0x02, 0x02, 0x80}, byte(0))
	f.Add([]byte{0x08, 0x01, 0x1a, 0x01, 0x00}, byte(0)) // seq as bytes
	f.Add(wire.Marshal(nil, &wire.Batch{Version: 1, AgentID: "x", Seq: 1, Host: "h"}), byte(1))
	list := wire.AppendListEntry(nil, len(good))
	list = append(list, good...)
	f.Add(list, byte(5))
	f.Add(list[:len(list)-3], byte(5))
	f.Add(zstdBytes(f, list), byte(8))
	big := batch("fuzz-seed", 2, "node1")
	big.ProcSeries[0].Times[4] = wire.MaxTimeMs
	f.Add(wire.Marshal(nil, big), byte(0))
	f.Cleanup(func() {
		ctx := context.Background()
		if _, err := r.st.Jobs(ctx, store.JobFilter{}); err != nil {
			f.Errorf("after fuzzing, the store does not answer: %v", err)
		}
		if a := r.send(f, batch("fuzz-after", 1, "node9")); a.code != http.StatusOK || a.reply.Status != "stored" {
			f.Errorf("after fuzzing, a good batch: %d %s", a.code, a.raw)
		}
	})
	f.Fuzz(func(t *testing.T, body []byte, enc byte) {
		hdr := map[string]string{}
		switch enc % 5 {
		case 0:
			hdr["Content-Encoding"] = "identity"
		case 1:
			body = zstdBytes(t, body)
		case 2:
			body, hdr["Content-Encoding"] = gzipBytes(t, body), "gzip"
		case 3: // as sent, said to be zstd
		case 4:
			hdr["Content-Encoding"] = "gzip"
		}
		if enc/5%2 == 1 {
			// The same bytes as a list of batches.
			hdr["Content-Type"] = wire.ListContentType
		}
		before := r.samples(t)
		a := r.post(t, bytes.NewReader(body), hdr)
		switch a.code {
		case http.StatusOK:
			if a.reply.Status != "stored" && a.reply.Status != "duplicate" {
				t.Errorf("200 with %s", a.raw)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity:
			if a.reply.Error == "" {
				t.Errorf("%d without an error message: %s", a.code, a.raw)
			}
			if after := r.samples(t); after != before {
				t.Errorf("a refused body changed the store from %+v to %+v", before, after)
			}
		default:
			t.Errorf("answer %d %s", a.code, a.raw)
		}
	})
}
