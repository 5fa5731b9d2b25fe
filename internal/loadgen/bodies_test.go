package loadgen

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/taskscope/taskscope/internal/wire"
)

// A bodies file gives back what Prepare makes, in order, and a file cut
// short is an error, not a shorter run.
func TestBodiesFile(t *testing.T) {
	cfg := Config{Nodes: 3, Slots: 2, Duration: 2 * time.Minute, Seed: 4, Start: time.Unix(1_700_000_000, 0)}
	want := Prepare(cfg)
	path := filepath.Join(t.TempDir(), "bodies")
	p, err := PrepareFile(cfg, path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Batches != len(want) || p.Batches != 3*24 {
		t.Fatalf("%d batches in the file, Prepare made %d", p.Batches, len(want))
	}
	br, err := OpenBodies(path)
	if err != nil {
		t.Fatal(err)
	}
	var samples int64
	for i := 0; ; i++ {
		b, err := br.Next()
		if errors.Is(err, io.EOF) {
			if i != len(want) {
				t.Errorf("%d bodies read, %d written", i, len(want))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		w := want[i]
		if b.Agent != w.Agent || b.Seq != w.Seq || b.SentMs != w.SentMs || b.Samples != w.Samples || !bytes.Equal(b.Data, w.Data) {
			t.Fatalf("body %d: %s/%d %d samples %d bytes, want %s/%d %d samples %d bytes", i, b.Agent, b.Seq, b.Samples,
				len(b.Data), w.Agent, w.Seq, w.Samples, len(w.Data))
		}
		samples += int64(b.Samples)
	}
	br.Close()
	if samples != p.Samples {
		t.Errorf("%d samples read, %d written", samples, p.Samples)
	}
	fi, _ := os.Stat(path)
	os.Truncate(path, fi.Size()-10)
	br, _ = OpenBodies(path)
	defer br.Close()
	var last error
	for last == nil {
		_, last = br.Next()
	}
	if !errors.Is(last, io.ErrUnexpectedEOF) {
		t.Errorf("a file cut short ends with %v", last)
	}
}

// The remote write bodies carry the same process samples as the taskscope
// ones, one time series per metric of each series, with the labels that
// say whose series it is.
func TestRemoteWriteFile(t *testing.T) {
	cfg := Config{Nodes: 3, Slots: 2, Duration: 2 * time.Minute, Seed: 4, Start: time.Unix(1_700_000_000, 0)}
	want := Prepare(cfg)
	p, err := PrepareRemoteWriteFile(cfg, filepath.Join(t.TempDir(), "rw"))
	if err != nil {
		t.Fatal(err)
	}
	br, err := OpenBodies(p.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	attempts := 0
	for i := range want {
		b, err := br.Next()
		if err != nil {
			t.Fatal(err)
		}
		if b.Agent != want[i].Agent || b.Seq != want[i].Seq || b.Samples != want[i].Samples {
			t.Fatalf("body %d is %s/%d with %d samples, want %s/%d with %d", i, b.Agent, b.Seq, b.Samples,
				want[i].Agent, want[i].Seq, want[i].Samples)
		}
		req, err := s2.Decode(nil, b.Data)
		if err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		// Every process sample has its CPU time, so the points of that
		// metric are the batch's samples.
		cpu := 0
		for _, ts := range fields(t, req, 1) {
			labels := map[string]string{}
			var names []string
			for _, l := range fields(t, ts, 1) {
				kv := fields(t, l, 1, 2)
				labels[string(kv[0])] = string(kv[1])
				names = append(names, string(kv[0]))
			}
			points := fields(t, ts, 2)
			if !slices.IsSorted(names) || len(points) == 0 || labels["host"] == "" {
				t.Fatalf("body %d: labels %v, %d points", i, names, len(points))
			}
			switch labels["__name__"] {
			case wire.CPUUserMs:
				cpu += len(points)
				if labels["pid"] == "" || labels["pid"] == "0" || labels["process"] == "" {
					t.Fatalf("body %d: a process series without its pid or key: %v", i, labels)
				}
			case "attempt_" + wire.AttemptCPUMs:
				attempts++
				if labels["attempt"] == "" || labels["job"] == "" {
					t.Fatalf("body %d: an attempt series without its attempt or job: %v", i, labels)
				}
			}
		}
		if cpu != b.Samples {
			t.Fatalf("body %d: %d CPU points for %d samples", i, cpu, b.Samples)
		}
	}
	if _, err := br.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last body: %v", err)
	}
	if attempts == 0 {
		t.Fatal("no attempt series")
	}
}

// fields returns the values of the length-delimited fields of msg numbered
// nums (all of them when there is one number; else one each, in order).
func fields(t *testing.T, msg []byte, nums ...protowire.Number) [][]byte {
	t.Helper()
	var out [][]byte
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		msg = msg[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, msg)
			msg = msg[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(msg)
		if n < 0 {
			t.Fatalf("bad field: %v", protowire.ParseError(n))
		}
		msg = msg[n:]
		if slices.Contains(nums, num) {
			out = append(out, v)
		}
	}
	if len(nums) > 1 && len(out) != len(nums) {
		t.Fatalf("%d fields, want %d", len(out), len(nums))
	}
	return out
}
