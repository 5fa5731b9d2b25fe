package ingest

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/taskscope/taskscope/internal/auth"
	"github.com/taskscope/taskscope/internal/wire"
)

// TestHostToken: a token bound to a host writes that host's data only (its
// batches name the host, come from its agents, and describe its processes),
// and a token file may hold hashes rather than tokens.
func TestHostToken(t *testing.T) {
	r := newRig(t, rigOptions{handler: HandlerOptions{Tokens: tokens(t, auth.Hash("node1-token")+" node1\nany-token\n")}})
	as := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	send := func(tok string, b *wire.Batch) answer {
		return r.post(t, strings.NewReader(string(zstdBytes(t, wire.Marshal(nil, b)))), as(tok))
	}
	own := batch("node1-4f2a", 1, "node1")
	if a := send("node1-token", own); a.code != http.StatusOK || a.reply.Status != "stored" {
		t.Fatalf("the host's own batch: %d %s", a.code, a.raw)
	}
	// An agent keys its processes by their starts from btime and reports
	// exact starts, up to a second later: the batch says by how much.
	exact := batch("node1-4f2a", 2, "node1")
	exact.KeyStartOffsetMs = 637
	for i := range exact.Processes {
		exact.Processes[i].StartMs += 637
	}
	if a := send("node1-token", exact); a.code != http.StatusOK || a.reply.Status != "stored" {
		t.Fatalf("the host's own batch with exact starts: %d %s", a.code, a.raw)
	}
	for _, c := range []struct {
		name string
		b    func() *wire.Batch
		msg  string
	}{
		{"another host", func() *wire.Batch { return batch("node2-1", 1, "node2") }, "this token writes host node1's data, not node2's"},
		{"another host's agent", func() *wire.Batch { return batch("node2-4f2a", 2, "node1") }, `agent_id must be node1 or start with node1-, not "node2-4f2a"`},
		{"another host's process", func() *wire.Batch {
			b := batch("node1-4f2a", 3, "node1")
			b.Processes[0].Key = wire.ProcessKey("node2", b.Processes[0].PID, b.Processes[0].StartMs)
			return b
		}, "is not host node1's process key"},
		{"exact starts without their offset", func() *wire.Batch {
			b := batch("node1-4f2a", 3, "node1")
			b.Processes[0].StartMs += 637
			return b
		}, "is not host node1's process key"},
	} {
		if a := send("node1-token", c.b()); a.code != http.StatusForbidden || !strings.Contains(a.reply.Error, c.msg) {
			t.Errorf("%s: %d %s, want 403 with %q", c.name, a.code, a.raw, c.msg)
		}
	}
	// The hash itself is no token; a token bound to no host writes any.
	if a := send(auth.Hash("node1-token"), batch("node1-x", 1, "node1")); a.code != http.StatusUnauthorized {
		t.Errorf("the hash as a token: %d %s", a.code, a.raw)
	}
	if a := send("any-token", batch("node2-1", 1, "node2")); a.code != http.StatusOK {
		t.Errorf("a token of any host: %d %s", a.code, a.raw)
	}
}

// TestServerMasks: what an agent that does not mask sends is masked by the
// server before it is stored.
func TestServerMasks(t *testing.T) {
	r := newRig(t, rigOptions{})
	b := batch("agent-m", 1, "node1")
	b.Processes[0].Cmdline = "java -Dfs.s3a.secret.key=SRVSECRET1 org.apache.hadoop.mapred.YarnChild --jdbc jdbc:mysql://db/x?user=etl&password=SRVSECRET3"
	b.Attempts[0].JavaOpts = "-Xmx1g -Djavax.net.ssl.keyStorePassword=SRVSECRET2"
	if a := r.send(t, b); a.code != http.StatusOK {
		t.Fatalf("%d %s", a.code, a.raw)
	}
	d, err := r.st.Attempt(context.Background(), b.Attempts[0].AttemptID)
	if err != nil {
		t.Fatal(err)
	}
	var cmd string
	for _, p := range d.ProcessList {
		cmd += p.Cmdline + "\n"
	}
	if strings.Contains(cmd+d.JavaOpts, "SRVSECRET") || !strings.Contains(cmd, "-Dfs.s3a.secret.key=*****") ||
		!strings.Contains(cmd, "?user=etl&password=*****") ||
		d.JavaOpts != "-Xmx1g -Djavax.net.ssl.keyStorePassword=*****" {
		t.Errorf("stored: %q, java opts %q", cmd, d.JavaOpts)
	}
}

// TestDuplicateBrokenBody: a batch whose (agent_id, seq) was stored is
// answered 200 with X-Taskscope-Duplicate as docs/wire.md says, even when
// its body is cut or breaks a rule now (issue 16: it was answered 400/422);
// a broken body of a new seq is refused as before.
func TestDuplicateBrokenBody(t *testing.T) {
	r := newRig(t, rigOptions{})
	b := batch("agent-d", 3, "node1")
	if a := r.send(t, b); a.code != http.StatusOK || a.reply.Status != "stored" {
		t.Fatalf("%d %s", a.code, a.raw)
	}
	data := wire.Marshal(nil, b)
	bad := batch("agent-d", 2, "node1") // an earlier seq, now invalid
	bad.Metrics[0] = "NOT A NAME"
	for name, body := range map[string][]byte{
		"cut":              data[:len(data)-9],
		"an earlier seq":   wire.Marshal(nil, bad),
		"garbage appended": append(append([]byte(nil), data...), 0xff, 0xff),
	} {
		a := r.post(t, strings.NewReader(string(zstdBytes(t, body))), nil)
		if a.code != http.StatusOK || a.reply.Status != "duplicate" || a.header.Get("X-Taskscope-Duplicate") != "true" {
			t.Errorf("%s: %d %s", name, a.code, a.raw)
		}
	}
	next := wire.Marshal(nil, batch("agent-d", 4, "node1"))
	if a := r.post(t, strings.NewReader(string(zstdBytes(t, next[:len(next)-9]))), nil); a.code != http.StatusBadRequest {
		t.Errorf("a broken new batch: %d %s", a.code, a.raw)
	}
	if u := r.samples(t); u.Samples != 10 {
		t.Errorf("the store holds %d samples, want 10", u.Samples)
	}
}
