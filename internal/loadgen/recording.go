package loadgen

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/taskscope/taskscope/internal/wire"
)

// A recording is what a real agent sent, kept to be replayed: a zstd stream
// of batches, each a uvarint length and the batch encoded as on the wire.
// testdata/agent-sim.rec.zst was recorded from taskscope-agent beside the
// simulator (see TestRecordAgent).

// WriteRecording writes batches as a recording.
func WriteRecording(w io.Writer, batches []*wire.Batch) error {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	if err != nil {
		return err
	}
	var buf, n []byte
	for _, b := range batches {
		buf = wire.Marshal(buf[:0], b)
		n = binary.AppendUvarint(n[:0], uint64(len(buf)))
		if _, err := zw.Write(n); err != nil {
			return err
		}
		if _, err := zw.Write(buf); err != nil {
			return err
		}
	}
	return zw.Close()
}

// ReadRecording reads a recording.
func ReadRecording(r io.Reader) ([]*wire.Batch, error) {
	zr, err := zstd.NewReader(r)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	br := bufio.NewReader(zr)
	var out []*wire.Batch
	for {
		n, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("recording: %w", err)
		}
		if n > 256<<20 {
			return nil, fmt.Errorf("recording: batch of %d bytes", n)
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, fmt.Errorf("recording: %w", err)
		}
		b, err := wire.Unmarshal(buf, wire.DefaultLimits)
		if err != nil {
			return nil, fmt.Errorf("recording: batch %d: %w", len(out), err)
		}
		out = append(out, b)
	}
}

// ReadRecordingFile reads a recording file.
func ReadRecordingFile(path string) ([]*wire.Batch, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadRecording(f)
}

// Replay makes a large cluster out of a recording of one agent: node i,
// pass k sends the recorded batches again, shifted in time by k times the
// recording's span (plus a per-node offset), under its own host name, agent
// id and process keys, with the cluster timestamps in job, attempt and
// container ids changed so that every node and pass has jobs of its own.
// The samples themselves are the recorded ones.
type Replay struct {
	rec   []*wire.Batch
	span  int64
	t0    int64
	nodes int
	pass  int
	ts    []string // cluster timestamps found in the ids
	procs map[uint64]wire.Process
}

// NewReplay replays rec (batches of one agent, in order) on nodes nodes.
func NewReplay(rec []*wire.Batch, nodes int) *Replay {
	r := &Replay{rec: rec, nodes: max(nodes, 1), procs: map[uint64]wire.Process{}}
	lo, hi := int64(1<<62), int64(0)
	seen := map[string]bool{}
	for _, b := range rec {
		for _, p := range b.Processes {
			r.procs[p.Key] = p
		}
		for _, s := range b.ProcSeries {
			lo, hi = min(lo, s.Times[0]), max(hi, s.Times[len(s.Times)-1])
		}
		for _, s := range b.AttemptSeries {
			lo, hi = min(lo, s.Times[0]), max(hi, s.Times[len(s.Times)-1])
		}
		for _, a := range b.Attempts {
			for _, id := range []string{a.JobID, a.AttemptID, a.ContainerID, a.AppID} {
				if ts := clusterTS(id); ts != "" && !seen[ts] {
					seen[ts] = true
					r.ts = append(r.ts, ts)
				}
			}
		}
	}
	sort.Strings(r.ts)
	r.t0 = lo
	r.span = hi - lo + 60_000
	return r
}

// Span is the recording's time span (plus a minute between passes).
func (r *Replay) Span() int64 { return r.span }

// clusterTS finds the 13-digit cluster timestamp of a Hadoop id.
func clusterTS(id string) string {
	for _, part := range strings.Split(id, "_") {
		if len(part) == 13 {
			if _, err := strconv.ParseInt(part, 10, 64); err == nil {
				return part
			}
		}
	}
	return ""
}

// Pass returns the batches of the next pass over the recording, every node's
// batches in time order, interleaved as the nodes would send them; start is
// where the first pass begins (unix ms).
func (r *Replay) Pass(start int64) []*wire.Batch {
	k := r.pass
	r.pass++
	var out []*wire.Batch
	for bi := range r.rec {
		for n := 0; n < r.nodes; n++ {
			out = append(out, r.rebatch(r.rec[bi], n, k, start, uint64(bi+1)))
		}
	}
	return out
}

func (r *Replay) rebatch(src *wire.Batch, node, pass int, start int64, seq uint64) *wire.Batch {
	host := fmt.Sprintf("replay%03d.sim", node+1)
	shift := start - r.t0 + int64(pass)*r.span + int64(node)*137
	var repl []string
	for i, ts := range r.ts {
		v, _ := strconv.ParseInt(ts, 10, 64)
		repl = append(repl, ts, strconv.FormatInt(v+int64(pass*r.nodes+node+1)*1000+int64(i), 10))
	}
	ids := strings.NewReplacer(repl...)
	ms := func(v int64) int64 {
		if v == 0 {
			return 0
		}
		return v + shift
	}
	rekey := func(k uint64) uint64 {
		if k == 0 {
			return 0
		}
		if p, ok := r.procs[k]; ok {
			return wire.ProcessKey(host, p.PID, ms(p.StartMs))
		}
		return k ^ (uint64(node+1) * 0x9e3779b97f4a7c15) ^ (uint64(pass+1) * 0xc2b2ae3d27d4eb4f)
	}
	b := &wire.Batch{Version: src.Version, AgentID: fmt.Sprintf("%s-replay%d", host, pass), Seq: seq, Host: host,
		SentMs: ms(src.SentMs), Metrics: src.Metrics, Stats: src.Stats}
	for _, p := range src.Processes {
		p.Key, p.StartMs, p.EndMs = rekey(p.Key), ms(p.StartMs), ms(p.EndMs)
		p.Cmdline = ids.Replace(p.Cmdline)
		b.Processes = append(b.Processes, p)
	}
	for _, a := range src.Attempts {
		a.AttemptID, a.JobID, a.ContainerID, a.AppID = ids.Replace(a.AttemptID), ids.Replace(a.JobID), ids.Replace(a.ContainerID), ids.Replace(a.AppID)
		a.FirstMs, a.LastMs = ms(a.FirstMs), ms(a.LastMs)
		b.Attempts = append(b.Attempts, a)
	}
	for _, m := range src.Members {
		m.Process, m.AttemptID, m.FromMs, m.ToMs = rekey(m.Process), ids.Replace(m.AttemptID), ms(m.FromMs), ms(m.ToMs)
		b.Members = append(b.Members, m)
	}
	shiftTimes := func(t []int64) []int64 {
		out := make([]int64, len(t))
		for i, v := range t {
			out[i] = v + shift
		}
		return out
	}
	for _, s := range src.ProcSeries {
		s.Key, s.Times = rekey(s.Key), shiftTimes(s.Times)
		b.ProcSeries = append(b.ProcSeries, s)
	}
	for _, s := range src.AttemptSeries {
		s.AttemptID, s.Times = ids.Replace(s.AttemptID), shiftTimes(s.Times)
		b.AttemptSeries = append(b.AttemptSeries, s)
	}
	for _, e := range src.Events {
		e.Ms, e.Process, e.AttemptID, e.JobID = ms(e.Ms), rekey(e.Process), ids.Replace(e.AttemptID), ids.Replace(e.JobID)
		b.Events = append(b.Events, e)
	}
	return b
}
