package duckdb

import (
	"testing"

	"github.com/taskscope/taskscope/internal/store/chunk"
)

// TestEncodeLongSteadySeries: a series of regular times and values that
// never change (a process asleep for days, rolled up a point a minute)
// takes a few bytes whatever its length. Compaction and rollups cut it into
// chunks that each decode: one chunk of its 10,000 points claimed more
// samples than its bytes could hold, and no read of the series succeeded.
func TestEncodeLongSteadySeries(t *testing.T) {
	const n = 10_000
	c := &chunk.Chunk{Times: make([]int64, n), Columns: []chunk.Column{{ID: 0, Values: make([]int64, n)}, {ID: 1, Values: make([]int64, n)}}}
	for i := range c.Times {
		c.Times[i] = 1_796_000_000_000 + int64(i)*rollupPeriod
		c.Columns[1].Values[i] = 512 << 20
	}
	for _, lvl := range []chunk.Level{chunk.Fast, chunk.Packed} {
		var w chunk.Writer
		var perSample float64
		got, chunks := 0, 0
		_, err := encodeChunks(&w, c, lvl, nil, &perSample, func(part *chunk.Chunk, data []byte) error {
			d, err := chunk.Decode(data)
			if err != nil {
				t.Errorf("level %d: chunk %d (%d samples in %d bytes): %v", lvl, chunks, len(part.Times), len(data), err)
				return nil
			}
			if len(d.Times) == 0 || d.Times[0] != c.Times[got] || d.Columns[1].Values[len(d.Times)-1] != 512<<20 {
				t.Errorf("level %d: chunk %d decodes to other samples", lvl, chunks)
			}
			got += len(d.Times)
			chunks++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got != n {
			t.Errorf("level %d: %d samples decoded in %d chunks, want %d", lvl, got, chunks, n)
		}
	}
}
