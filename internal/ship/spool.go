package ship

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// spool keeps each batch in a file of its own until the server has it:
// <dir>/<unix nanos>-<seq>.batch, written to a temporary name and renamed,
// so that a crash leaves whole batches or none. A batch that waits is
// synced before it is renamed; one sent at once is synced (the file, then
// the directory) only if that delivery fails (Shipper): a killed agent
// loses nothing written, a machine that loses power may lose the batch of
// the moment. The file starts with one line "tsb1 <agent id> <seq>
// <samples>", then the compressed body.
type spool struct {
	dir string
}

const spoolMagic = "tsb1"

func openSpool(dir string) (*spool, []*item, error) {
	if err := os.MkdirAll(filepath.Join(dir, "rejected"), 0o750); err != nil {
		return nil, nil, fmt.Errorf("cannot create spool %s: %w", dir, err)
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.batch"))
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(names) // the nanosecond prefix orders batches as they were made
	var items []*item
	for _, n := range names {
		it, err := readSpoolFile(n)
		if err != nil {
			// A damaged file: keep it aside for inspection, do not send it.
			os.Rename(n, filepath.Join(dir, "rejected", filepath.Base(n)))
			continue
		}
		it.body = nil // read again when sent
		items = append(items, it)
	}
	// Leftover temporary files are batches whose write never finished.
	tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
	for _, t := range tmps {
		os.Remove(t)
	}
	return &spool{dir: dir}, items, nil
}

func readSpoolFile(name string) (*item, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("spool file %s: no header: %w", name, err)
	}
	fields := strings.Fields(line)
	if len(fields) != 4 || fields[0] != spoolMagic {
		return nil, fmt.Errorf("spool file %s: bad header %q", name, line)
	}
	seq, err1 := strconv.ParseUint(fields[2], 10, 64)
	samples, err2 := strconv.Atoi(fields[3])
	if err1 != nil || err2 != nil || seq == 0 {
		return nil, fmt.Errorf("spool file %s: bad header %q", name, line)
	}
	body, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return &item{agentID: fields[1], seq: seq, samples: samples, body: body, size: int64(len(body)), file: name}, nil
}

// write writes it to the spool (synced when sync) and notes its file in it.
func (s *spool) write(it *item, sync bool) error {
	name, err := s.writeFile(it, sync)
	if err == nil {
		it.file, it.synced = name, sync
	}
	return err
}

// writeFile writes it to a spool file named by when it was queued, so that
// a batch spooled late (held in memory while the spool was full) is still
// replayed in order, and returns the file's name. sync: on disk before
// the rename (the directory is not synced for each: a batch whose
// delivery fails has it synced then, Shipper.sync).
func (s *spool) writeFile(it *item, sync bool) (string, error) {
	name := filepath.Join(s.dir, fmt.Sprintf("%020d-%012d.batch", it.made, it.seq))
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return "", err
	}
	var hdr bytes.Buffer
	fmt.Fprintf(&hdr, "%s %s %d %d\n", spoolMagic, it.agentID, it.seq, it.samples)
	_, err = f.Write(hdr.Bytes())
	if err == nil {
		_, err = f.Write(it.body)
	}
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return name, nil
}

// sync makes a spool file written unsynced durable: its data, then the
// directory that names it.
func (s *spool) sync(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return s.syncDir()
}

// syncDir makes the spool directory's entries (a rename) durable.
func (s *spool) syncDir() error {
	d, err := os.Open(s.dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *spool) remove(it *item) {
	os.Remove(it.file)
	it.file = ""
}

func (s *spool) reject(it *item) {
	if it.file != "" {
		os.Rename(it.file, filepath.Join(s.dir, "rejected", filepath.Base(it.file)))
	}
}
