package loadgen

import (
	"math"
	"strconv"

	"github.com/klauspost/compress/s2"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/taskscope/taskscope/internal/wire"
)

// RemoteWrite is the Prometheus remote write protocol (version 0.1.0:
// a snappy-compressed protobuf WriteRequest), which VictoriaMetrics takes
// at /api/v1/write: the bodies PrepareRemoteWriteFile writes.
var RemoteWrite = Endpoint{Path: "/api/v1/write", ContentType: "application/x-protobuf", ContentEncoding: "snappy"}

// PrepareRemoteWriteFile writes the batches PrepareFile writes for cfg
// (the same seed makes the same data) as Prometheus remote write bodies,
// as vmagent would send them to VictoriaMetrics: one time series per
// metric of each process's and each attempt's series in a batch, with the
// points present in it, labelled as a Prometheus-style design would label
// them: a process's series with its host, key, pid, attempt and job, an
// attempt's with its host, attempt and job (names as in the batch; an
// attempt's metrics prefixed "attempt_"). Posted to RemoteWrite, they give
// VictoriaMetrics the data taskscope is given: the baseline the ingest
// target is measured against. A body's Samples counts its process samples,
// as a taskscope body's does.
func PrepareRemoteWriteFile(cfg Config, path string) (Prepared, error) {
	v := &rwEncoder{procs: map[uint64][]byte{}, attempts: map[uint64]string{}, pids: map[uint64]int32{}, jobs: map[string]string{}}
	return writeBodies(generate(cfg), path, v.encode)
}

// rwEncoder keeps the labels that the batch carrying a series does not
// say: a process's attempt and pid are described once, in an earlier
// batch.
type rwEncoder struct {
	procs    map[uint64][]byte // a process's labels but its name, encoded
	attempts map[uint64]string // a process's attempt
	pids     map[uint64]int32
	jobs     map[string]string // an attempt's job
	buf, ts  []byte
}

func (v *rwEncoder) encode(b *wire.Batch) Body {
	for _, a := range b.Attempts {
		v.jobs[a.AttemptID] = a.JobID
	}
	for _, p := range b.Processes {
		v.pids[p.Key] = p.PID
		delete(v.procs, p.Key)
	}
	for _, m := range b.Members {
		if v.attempts[m.Process] != m.AttemptID {
			v.attempts[m.Process] = m.AttemptID
			delete(v.procs, m.Process)
		}
	}
	out := v.buf[:0]
	for i := range b.ProcSeries {
		s := &b.ProcSeries[i]
		labels, ok := v.procs[s.Key]
		if !ok {
			att := v.attempts[s.Key]
			// Sorted by name, as remote write asks ("__name__" first).
			labels = appendLabels(nil, "attempt", att, "host", b.Host, "job", v.jobs[att],
				"pid", strconv.Itoa(int(v.pids[s.Key])), "process", strconv.FormatUint(s.Key, 16))
			v.procs[s.Key] = labels
		}
		out = v.appendSeries(out, b.Metrics, "", labels, s)
	}
	for i := range b.AttemptSeries {
		s := &b.AttemptSeries[i]
		labels := appendLabels(nil, "attempt", s.AttemptID, "host", b.Host, "job", v.jobs[s.AttemptID])
		out = v.appendSeries(out, b.Metrics, "attempt_", labels, s)
	}
	for _, p := range b.Processes {
		if p.EndMs != 0 {
			delete(v.procs, p.Key)
			delete(v.attempts, p.Key)
			delete(v.pids, p.Key)
		}
	}
	v.buf = out
	return Body{Agent: b.AgentID, Seq: b.Seq, SentMs: b.SentMs, Samples: b.SampleCount(), Data: s2.EncodeSnappy(nil, out)}
}

// appendLabels appends a Label message (field 1 of TimeSeries) for each
// name and value of kv.
func appendLabels(out []byte, kv ...string) []byte {
	for i := 0; i < len(kv); i += 2 {
		n := protowire.SizeTag(1) + protowire.SizeBytes(len(kv[i])) + protowire.SizeTag(2) + protowire.SizeBytes(len(kv[i+1]))
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(n))
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendString(out, kv[i])
		out = protowire.AppendTag(out, 2, protowire.BytesType)
		out = protowire.AppendString(out, kv[i+1])
	}
	return out
}

// appendSeries appends to a WriteRequest one TimeSeries (its field 1) per
// column of s with points present: those points.
func (v *rwEncoder) appendSeries(out []byte, metrics []string, prefix string, labels []byte, s *wire.Series) []byte {
	for _, c := range s.Columns {
		ts := appendLabels(v.ts[:0], "__name__", prefix+metrics[c.Metric])
		ts = append(ts, labels...)
		points := 0
		for j, t := range s.Times {
			if c.IsAbsent(j) {
				continue
			}
			points++
			n := protowire.SizeTag(1) + protowire.SizeFixed64() + protowire.SizeTag(2) + protowire.SizeVarint(uint64(t))
			ts = protowire.AppendTag(ts, 2, protowire.BytesType)
			ts = protowire.AppendVarint(ts, uint64(n))
			ts = protowire.AppendTag(ts, 1, protowire.Fixed64Type)
			ts = protowire.AppendFixed64(ts, math.Float64bits(float64(c.Values[j])))
			ts = protowire.AppendTag(ts, 2, protowire.VarintType)
			ts = protowire.AppendVarint(ts, uint64(t))
		}
		v.ts = ts
		if points == 0 {
			continue
		}
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, ts)
	}
	return out
}
