package ingest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/taskscope/taskscope/internal/testsrv"
	"github.com/taskscope/taskscope/internal/wire"
)

// The hostile bodies of issue 16, built small: a 300 KB gzip body that
// expands to 300 MiB (gzip members of 1 MiB of zeros, one after another),
// and a zstd body of a few KB that expands to 1 GiB (frames of 64 MiB).
func gzipBomb(t testing.TB) []byte {
	var one bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&one, gzip.BestCompression)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	return bytes.Repeat(one.Bytes(), 300)
}

func zstdBomb(t testing.TB) []byte {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return bytes.Repeat(enc.EncodeAll(make([]byte, 64<<20), nil), 16)
}

// allocated runs f and returns what the process allocated meanwhile.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHostileBombs: each bomb is refused with 413 having allocated a small
// part of its size (what it takes is bounded by the decompressed limit,
// 64 MiB, once, and the decoder's window, never by what it expands to),
// and gives its memory back.
func TestHostileBombs(t *testing.T) {
	r := newRig(t, rigOptions{})
	for _, c := range []struct {
		name, enc string
		body      []byte
		expands   uint64
	}{{"gzip", "gzip", gzipBomb(t), 300 << 20}, {"zstd", "zstd", zstdBomb(t), 1 << 30}} {
		var a answer
		n := allocated(func() { a = r.post(t, bytes.NewReader(c.body), map[string]string{"Content-Encoding": c.enc}) })
		t.Logf("%s bomb of %d bytes (%d MiB decompressed): %d %s; %.1f MiB allocated", c.name, len(c.body), c.expands>>20, a.code, a.reply.Error, float64(n)/(1<<20))
		if a.code != http.StatusRequestEntityTooLarge || !strings.Contains(a.reply.Error, "decompressed body too large: limit 67108864 bytes") {
			t.Errorf("%s bomb: %d %s", c.name, a.code, a.raw)
		}
		if n > 80<<20 {
			t.Errorf("%s bomb: %d MiB allocated, want at most 80 (it expands to %d MiB)", c.name, n>>20, c.expands>>20)
		}
		if u := r.h.o.Budget.InUse(); u != 0 {
			t.Errorf("after the %s bomb, %d bytes of the budget are still taken", c.name, u)
		}
	}
}

// TestZstdStreams: zstd bodies written as streams (no content size in the
// frame): one that expands many times its size is taken whole; a bomb of
// 1 GiB is refused at the limit, having allocated it once (decoded once,
// into chunks never joined).
func TestZstdStreams(t *testing.T) {
	r := newRig(t, rigOptions{})
	// A valid batch with a long, repetitive command line: it compresses
	// more than 8 times.
	b := batch("agent-z", 1, "node1")
	b.Processes[0].Cmdline = strings.Repeat("java -Dx=y ", 5000)[:50000]
	b.Processes[1].Cmdline = strings.Repeat(" -Dz=1", 10000)
	b.Attempts[0].JavaOpts = strings.Repeat(" -Dq=2", 10000)
	body := zstdStream(wire.Marshal(nil, b), 1)
	if a := r.post(t, bytes.NewReader(body), nil); a.code != http.StatusOK {
		t.Errorf("a stream of %d bytes: %d %s", len(body), a.code, a.raw)
	}
	bomb := zstdStream(make([]byte, 1<<20), 1024)
	var a answer
	n := allocated(func() { a = r.post(t, bytes.NewReader(bomb), nil) })
	if a.code != http.StatusRequestEntityTooLarge || !strings.Contains(a.reply.Error, "decompressed body too large") {
		t.Errorf("a stream bomb of %d bytes: %d %s", len(bomb), a.code, a.raw)
	}
	if n > 80<<20 {
		t.Errorf("a stream bomb: %d MiB allocated, want at most 80", n>>20)
	}
	if a := r.post(t, bytes.NewReader(append(zstdStream([]byte("garbage"), 1)[:12], 0xff, 0xff, 0xff)), nil); a.code != http.StatusBadRequest {
		t.Errorf("a broken stream: %d %s", a.code, a.raw)
	}
}

// TestHostileBombsAtOnce: eight gzip and eight zstd bombs at once, while
// an agent sends ordinary batches: the bombs are refused (413, or 503 when
// the budget is spent: retry), what they take together stays within the
// budget, and every ordinary batch is stored.
func TestHostileBombsAtOnce(t *testing.T) {
	// Limits an eighth of the defaults' (the race detector makes
	// decompressing slow); the defaults' bounds are TestHostileBombs'.
	budget := NewBudget(32 << 20)
	r := newRig(t, rigOptions{handler: HandlerOptions{Budget: budget, MaxDecodedBytes: 8 << 20, MaxRequestBytes: 16 << 20}})
	gz, zs := gzipBomb(t), zstdBomb(t)
	var wg sync.WaitGroup
	codes := make(chan answer, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				codes <- r.post(t, bytes.NewReader(gz), map[string]string{"Content-Encoding": "gzip"})
			} else {
				codes <- r.post(t, bytes.NewReader(zs), map[string]string{"Content-Encoding": "zstd"})
			}
		}()
	}
	for seq := uint64(1); seq <= 20; seq++ {
		if a := r.send(t, batch("agent-ok", seq, "node1")); a.code != http.StatusOK || a.reply.Status != "stored" {
			t.Errorf("ordinary batch %d beside the bombs: %d %s", seq, a.code, a.raw)
		}
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for a := range codes {
		n[a.code]++
		switch a.code {
		case http.StatusRequestEntityTooLarge:
		case http.StatusServiceUnavailable:
			if a.header.Get("Retry-After") == "" || !strings.Contains(a.reply.Error, "memory") {
				t.Errorf("503 for a bomb: %s (Retry-After %q)", a.raw, a.header.Get("Retry-After"))
			}
		default:
			t.Errorf("a bomb answered %d %s", a.code, a.raw)
		}
	}
	t.Logf("bombs answered %v; the budget's peak %.1f MiB of %d", n, float64(budget.Peak())/(1<<20), budget.Max()>>20)
	if budget.Peak() > budget.Max() || budget.InUse() != 0 {
		t.Errorf("budget peak %d of %d, %d still in use", budget.Peak(), budget.Max(), budget.InUse())
	}
}

// TestHostileSlowUploads: fifty uploads that announce 32 MiB and send a
// byte now and then are cut off at the body deadline with 408, holding a
// few KiB each meanwhile (never what they announce).
func TestHostileSlowUploads(t *testing.T) {
	budget := NewBudget(256 << 20)
	r := newRig(t, rigOptions{handler: HandlerOptions{Budget: budget, BodyTimeout: time.Second}})
	addr := strings.TrimPrefix(r.srv.URL, "http://")
	const uploads = 50
	var wg sync.WaitGroup
	answers := make(chan string, uploads)
	start := time.Now()
	n := allocated(func() {
		for range uploads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					answers <- err.Error()
					return
				}
				defer c.Close()
				fmt.Fprintf(c, "POST /api/v1/ingest HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nAuthorization: Bearer %s\r\nContent-Length: 33554432\r\n\r\n", wire.ContentType, token)
				stop := make(chan struct{})
				go func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(100 * time.Millisecond):
							c.Write([]byte{0})
						}
					}
				}()
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				close(stop)
				if err != nil {
					answers <- err.Error()
					return
				}
				body, _ := io.ReadAll(resp.Body)
				answers <- fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(body))
			}()
		}
		wg.Wait()
	})
	close(answers)
	took := time.Since(start)
	for a := range answers {
		if !strings.HasPrefix(a, "408 ") || !strings.Contains(a, "the body did not arrive within 1s") {
			t.Errorf("a slow upload: %s", a)
		}
	}
	t.Logf("%d slow uploads answered in %v; budget peak %d KiB; %.1f MiB allocated", uploads, took.Round(time.Millisecond), budget.Peak()>>10, float64(n)/(1<<20))
	if budget.Peak() > uploads*64<<10 {
		t.Errorf("the slow uploads held %d bytes of the budget at once", budget.Peak())
	}
	if n > 64<<20 {
		t.Errorf("the slow uploads allocated %d MiB (they announced 50 × 32 MiB)", n>>20)
	}
}

// TestHostileBudget: a batch that cannot get memory while the budget is
// spent is answered 503 with Retry-After (retry later); one that alone
// needs more than a request may take is 413.
func TestHostileBudget(t *testing.T) {
	budget := NewBudget(64 << 20)
	r := newRig(t, rigOptions{handler: HandlerOptions{Budget: budget, MaxRequestBytes: 16 << 20}})
	big := batch("agent-big", 1, "node1")
	for i := range big.ProcSeries {
		s := &big.ProcSeries[i]
		for len(s.Times) < 400_000 {
			s.Times = append(s.Times, s.Times[len(s.Times)-1]+1000)
			for k := range s.Columns {
				s.Columns[k].Values = append(s.Columns[k].Values, 1)
			}
		}
		for k := range s.Columns {
			s.Columns[k].Absent = nil
		}
	}
	if a := r.send(t, big); a.code != http.StatusRequestEntityTooLarge || !strings.Contains(a.reply.Error, "needs too much memory to decode: more than 16777216 bytes") {
		t.Errorf("a batch over the request's memory: %d %s", a.code, a.raw)
	}
	// Spend the budget, as requests in flight would.
	if !budget.take(budget.Max()-64<<10, false) {
		t.Fatal("cannot take the budget")
	}
	a := r.send(t, batch("agent-a", 1, "node1"))
	if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || !strings.Contains(a.reply.Error, "busy") {
		t.Errorf("with the budget spent: %d %s (Retry-After %q)", a.code, a.raw, a.header.Get("Retry-After"))
	}
	budget.give(budget.Max() - 64<<10)
	if a := r.send(t, batch("agent-a", 1, "node1")); a.code != http.StatusOK {
		t.Errorf("with the budget free again: %d %s", a.code, a.raw)
	}
	// A big request may take only while half of the budget is free.
	l := &lease{b: budget, max: budget.Max()}
	if err := l.take(budget.Max()/8 + 1); err != nil {
		t.Fatalf("a big lease: %v", err)
	}
	if err := l.take(budget.Max() / 2); err == nil {
		t.Error("a big lease took more than half of the budget")
	}
	l.release()
	if budget.InUse() != 0 {
		t.Errorf("%d bytes in use after all", budget.InUse())
	}
}

// TestBudgetWhileQueued: a request whose batch waits for its commit holds
// what its batch takes of the budget, not the decoder's last step of
// wire.ReserveStep: a budget of 64 steps holds 100 small batches waiting
// (at a commit a second, a thousand nodes' batches wait at once; beyond
// the default budget's 1,024 steps they were refused 503). (Each request
// also takes about 2.3 MB while it decodes its zstd body.)
func TestBudgetWhileQueued(t *testing.T) {
	budget := NewBudget(64 * wire.ReserveStep)
	r := newRig(t, rigOptions{handler: HandlerOptions{Budget: budget}})
	entered := r.gs.hold()
	const n = 100
	out := make(chan answer, n)
	for i := range n {
		go func() { out <- r.send(t, batch(fmt.Sprintf("agent-%d", i), 1, fmt.Sprintf("node%d", i))) }()
		if i == 0 {
			select {
			case <-entered: // (the writer holds the first, the others queue)
			case a := <-out:
				t.Fatalf("the first batch: %d %s", a.code, a.raw)
			}
			continue
		}
		testsrv.WaitUntil(t, fmt.Sprintf("batch %d queued or answered", i), 10*time.Second,
			func() bool { return len(r.p.q)+len(out) == i })
	}
	if len(out) > 0 {
		a := <-out
		t.Fatalf("answered %d %s while %d batches wait (%d of %d bytes of the budget in use)", a.code, a.raw, n,
			budget.InUse(), budget.Max())
	}
	if u := budget.InUse(); u >= n*wire.ReserveStep/4 {
		t.Errorf("%d batches waiting hold %d bytes of the budget", n, u)
	}
	r.gs.open()
	for range n {
		if a := <-out; a.code != http.StatusOK || a.reply.Status != "stored" {
			t.Errorf("after the writer went on: %d %s", a.code, a.raw)
		}
	}
	testsrv.WaitUntil(t, "the budget given back", 10*time.Second, func() bool { return budget.InUse() == 0 })
}

// TestHostileTimes: a process end of 2^62 ms (answered as a time of year
// 146140482 before) is refused, naming the field.
func TestHostileTimes(t *testing.T) {
	r := newRig(t, rigOptions{})
	b := batch("agent-t", 1, "node1")
	b.Processes[0].EndMs = 1 << 62
	if a := r.send(t, b); a.code != http.StatusUnprocessableEntity || !strings.Contains(a.reply.Error, "end_ms 4611686018427387904 is not a unix time in milliseconds") {
		t.Errorf("end 2^62: %d %s", a.code, a.raw)
	}
}

// zstdStream is data written times over to one zstd stream (no content
// size in its frame), as a client that compresses as it sends writes it.
func zstdStream(data []byte, times int) []byte {
	var out bytes.Buffer
	enc, _ := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedFastest))
	for range times {
		enc.Write(data)
	}
	enc.Close()
	return out.Bytes()
}
