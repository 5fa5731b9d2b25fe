package loadgen

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/taskscope/taskscope/internal/wire"
)

// A bodies file holds encoded batches, ready to send, so that a benchmark
// can prepare hours of simulated time before it starts and then stream it
// from the disk in little memory: the bodies of 90 minutes of 200 nodes are
// a gigabyte, and decoded many times more. Each body is its agent id
// (uvarint length and bytes), its seq (uvarint), when it was sent (varint,
// Unix ms), its samples (uvarint), and its data (uvarint length and bytes).

// Prepared sums up what PrepareFile wrote.
type Prepared struct {
	Path    string
	Batches int
	Samples int64
	Bytes   int64 // compressed, as sent
}

// PrepareFile generates cfg.Duration of simulated time, encodes it as
// Prepare does, and writes the bodies to a new file at path, in the order
// they are to be sent.
func PrepareFile(cfg Config, path string) (Prepared, error) {
	return writeBodies(generate(cfg), path, NewEncoder().Encode)
}

// PrepareReplayFile writes passes passes of r (the first starting at
// start), every node's batches in time order, to a new bodies file at
// path, as PrepareFile does with generated batches.
func PrepareReplayFile(r *Replay, passes int, start time.Time, path string) (Prepared, error) {
	rounds := make(chan []*wire.Batch, 1)
	go func() {
		for i := 0; i < passes; i++ {
			rounds <- r.Pass(start.UnixMilli())
		}
		close(rounds)
	}()
	return writeBodies(rounds, path, NewEncoder().Encode)
}

// writeBodies writes the bodies encode makes of the batches of rounds to
// a new file at path (and drains rounds).
func writeBodies(batches <-chan []*wire.Batch, path string, encode func(*wire.Batch) Body) (Prepared, error) {
	out := Prepared{Path: path}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		for range batches {
		}
		return out, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var hdr []byte
	for r := range batches {
		for _, b := range r {
			if err != nil {
				continue // drain the generator
			}
			bd := encode(b)
			hdr = binary.AppendUvarint(hdr[:0], uint64(len(bd.Agent)))
			hdr = append(hdr, bd.Agent...)
			hdr = binary.AppendUvarint(hdr, bd.Seq)
			hdr = binary.AppendVarint(hdr, bd.SentMs)
			hdr = binary.AppendUvarint(hdr, uint64(bd.Samples))
			hdr = binary.AppendUvarint(hdr, uint64(len(bd.Data)))
			if _, err = w.Write(hdr); err == nil {
				_, err = w.Write(bd.Data)
			}
			out.Batches++
			out.Samples += int64(bd.Samples)
			out.Bytes += int64(len(bd.Data))
		}
	}
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return out, fmt.Errorf("cannot write bodies to %s: %w", path, err)
	}
	return out, nil
}

// BodyReader reads the bodies of a file PrepareFile wrote, one at a time.
type BodyReader struct {
	f *os.File
	r *bufio.Reader
}

// OpenBodies opens a bodies file.
func OpenBodies(path string) (*BodyReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return &BodyReader{f: f, r: bufio.NewReaderSize(f, 1<<20)}, nil
}

// Next is the next body; io.EOF after the last.
func (br *BodyReader) Next() (Body, error) {
	var b Body
	n, err := binary.ReadUvarint(br.r)
	if err != nil {
		return b, err // io.EOF at the end
	}
	agent := make([]byte, n)
	if _, err := io.ReadFull(br.r, agent); err != nil {
		return b, unexpected(err)
	}
	b.Agent = string(agent)
	if b.Seq, err = binary.ReadUvarint(br.r); err != nil {
		return b, unexpected(err)
	}
	if b.SentMs, err = binary.ReadVarint(br.r); err != nil {
		return b, unexpected(err)
	}
	samples, err := binary.ReadUvarint(br.r)
	if err != nil {
		return b, unexpected(err)
	}
	b.Samples = int(samples)
	if n, err = binary.ReadUvarint(br.r); err != nil {
		return b, unexpected(err)
	}
	b.Data = make([]byte, n)
	if _, err := io.ReadFull(br.r, b.Data); err != nil {
		return b, unexpected(err)
	}
	return b, nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Close closes the file.
func (br *BodyReader) Close() error { return br.f.Close() }

// SendFile sends the bodies of a file PrepareFile wrote, as SendAll sends
// bodies held in memory.
func SendFile(ctx context.Context, cfg Config, path string) (Result, error) {
	br, err := OpenBodies(path)
	if err != nil {
		return Result{}, err
	}
	defer br.Close()
	ch := make(chan Body, 1024)
	var rerr error
	go func() {
		defer close(ch)
		for {
			b, err := br.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					rerr = err
				}
				return
			}
			select {
			case ch <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	res, err := Send(ctx, cfg, ch)
	if err == nil && rerr != nil {
		err = fmt.Errorf("cannot read bodies: %w", rerr)
	}
	return res, err
}
