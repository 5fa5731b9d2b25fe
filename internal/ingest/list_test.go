package ingest

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/taskscope/taskscope/internal/wire"
)

// listBody is a zstd list of bs, each batch compressed alone and the
// frames put one after the other, as an agent sends what it spooled.
func listBody(t testing.TB, bs ...*wire.Batch) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var body []byte
	for _, b := range bs {
		data := wire.Marshal(nil, b)
		if body, err = wire.AppendZstdListEntry(body, enc.EncodeAll(data, nil), len(data), enc); err != nil {
			t.Fatal(err)
		}
	}
	return body
}

func (r *rig) sendList(t testing.TB, bs ...*wire.Batch) answer {
	t.Helper()
	return r.post(t, bytes.NewReader(listBody(t, bs...)), map[string]string{"Content-Type": wire.ListContentType})
}

// TestHandlerList: a list's batches are stored in one commit, and said
// stored together; the list sent again is a duplicate; a list with
// batches stored before stores the others.
func TestHandlerList(t *testing.T) {
	r := newRig(t, rigOptions{})
	a := r.sendList(t, batch("agent-l", 1, "node1"), batch("agent-m", 1, "node2"), batch("agent-l", 2, "node1"))
	if a.code != http.StatusOK || a.reply.Status != "stored" || a.reply.Batches != 3 || a.reply.Samples != 30 || a.reply.Duplicates != 0 {
		t.Fatalf("list: %d %s", a.code, a.raw)
	}
	if u := r.samples(t); u.Samples != 30 {
		t.Errorf("store holds %d samples, want 30", u.Samples)
	}
	if r.gs.prepared != 3 {
		t.Errorf("%d batches appended, want 3", r.gs.prepared)
	}
	a = r.sendList(t, batch("agent-l", 1, "node1"), batch("agent-m", 1, "node2"), batch("agent-l", 2, "node1"))
	if a.code != http.StatusOK || a.reply.Status != "duplicate" || a.header.Get("X-Taskscope-Duplicate") != "true" {
		t.Fatalf("the list again: %d %s", a.code, a.raw)
	}
	a = r.sendList(t, batch("agent-l", 2, "node1"), batch("agent-l", 3, "node1"))
	if a.code != http.StatusOK || a.reply.Status != "stored" || a.reply.Batches != 2 || a.reply.Duplicates != 1 ||
		a.header.Get("X-Taskscope-Duplicate") != "" {
		t.Fatalf("a list of a batch stored before and a new one: %d %s", a.code, a.raw)
	}
	if u := r.samples(t); u.Samples != 40 {
		t.Errorf("store holds %d samples, want 40", u.Samples)
	}
}

// TestHandlerListRejects: a list with a bad batch, batches of an agent out
// of order, or another host's batch (a token bound to a host) is refused
// whole, saying which batch; nothing of it is stored.
func TestHandlerListRejects(t *testing.T) {
	r := newRig(t, rigOptions{handler: HandlerOptions{Tokens: tokens(t, token+" node1\n")}})
	bad := batch("node1-r", 2, "node1")
	bad.ProcSeries[0].Times = bad.ProcSeries[0].Times[:2] // columns longer than the times
	for _, c := range []struct {
		name string
		bs   []*wire.Batch
		code int
		says string
	}{
		{"invalid", []*wire.Batch{batch("node1-r", 1, "node1"), bad}, http.StatusUnprocessableEntity, "batches[1]"},
		{"out of order", []*wire.Batch{batch("node1-r", 2, "node1"), batch("node1-r", 1, "node1")}, http.StatusUnprocessableEntity,
			"batches[1]: seq 1 of agent \"node1-r\" after its seq 2"},
		{"another host", []*wire.Batch{batch("node1-a", 1, "node1"), batch("node2-a", 1, "node2")}, http.StatusForbidden, "batches[1]"},
	} {
		a := r.sendList(t, c.bs...)
		if a.code != c.code || !strings.Contains(a.reply.Error, c.says) {
			t.Errorf("%s: %d %s, want %d saying %q", c.name, a.code, a.raw, c.code, c.says)
		}
	}
	for name, body := range map[string][]byte{"not a list": zstdBytes(t, []byte{0x08, 0x01}), "empty": zstdBytes(t, nil)} {
		a := r.post(t, bytes.NewReader(body), map[string]string{"Content-Type": wire.ListContentType})
		if a.code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", name, a.code, a.raw)
		}
	}
	if u := r.samples(t); u.Samples != 0 {
		t.Errorf("store holds %d samples of refused lists", u.Samples)
	}
}
