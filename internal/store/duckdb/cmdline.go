package duckdb

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"sync"
)

// Command lines are stored against templates. Task JVMs (and the bash -c
// wrappers above them) of a cluster share their command line but for
// numbers: container, application and attempt ids, ports, -Xmx. The first
// command line of a shape (its text with every run of digits taken out) is
// kept once in cmd_templates; a process's command line is then the
// template's key and its runs of digits that differ from the template's:
// about 20 to 50 bytes where the text is 700.

// minTemplated is the shortest command line stored against a template;
// shorter ones are stored as text.
const minTemplated = 64

// cmdShape is a command line cut at its runs of digits.
type cmdShape struct {
	text string
	runs [][2]int // [start, end) of each maximal run of ASCII digits
	key  uint64   // hash of the text between the runs
	id   int32    // a template's number in cmd_templates
}

func shapeOf(s string) cmdShape {
	sh := cmdShape{text: s}
	h := fnv.New64a()
	last := 0
	for i := 0; i < len(s); {
		if !isDigit(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		h.Write([]byte(s[last:i]))
		h.Write([]byte{0xff}) // never in UTF-8: the runs' places are part of the shape
		sh.runs = append(sh.runs, [2]int{i, j})
		last, i = j, j
	}
	h.Write([]byte(s[last:]))
	sh.key = h.Sum64() | 1 // never 0
	return sh
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (sh *cmdShape) run(i int) string { return sh.text[sh.runs[i][0]:sh.runs[i][1]] }

// sameShape reports whether a and b have the same text between their runs
// (a hash collision of two shapes would otherwise decode to the wrong text).
func sameShape(a, b *cmdShape) bool {
	if len(a.runs) != len(b.runs) {
		return false
	}
	pa, pb := 0, 0
	for i := range a.runs {
		if a.text[pa:a.runs[i][0]] != b.text[pb:b.runs[i][0]] {
			return false
		}
		pa, pb = a.runs[i][1], b.runs[i][1]
	}
	return a.text[pa:] == b.text[pb:]
}

// encodeArgs says how s differs from its template: for each run that
// differs, the gap from the previous such run (uvarint), then either an
// earlier run of s with the same digits (2*index+1) or the digits
// themselves (2*count, then two digits a byte).
func encodeArgs(dst []byte, tmpl, s *cmdShape) []byte {
	prev := -1
	for i := range s.runs {
		r := s.run(i)
		if r == tmpl.run(i) {
			continue
		}
		dst = binary.AppendUvarint(dst, uint64(i-prev-1))
		prev = i
		ref := -1
		for j := 0; j < i; j++ {
			if s.run(j) == r {
				ref = j
				break
			}
		}
		if ref >= 0 {
			dst = binary.AppendUvarint(dst, uint64(2*ref+1))
			continue
		}
		dst = binary.AppendUvarint(dst, uint64(2*len(r)))
		for k := 0; k < len(r); k += 2 {
			b := (r[k] - '0') << 4
			if k+1 < len(r) {
				b |= r[k+1] - '0'
			}
			dst = append(dst, b)
		}
	}
	return dst
}

var errArgs = errors.New("damaged command line arguments")

// decodeArgs is the command line that args make of the template.
func decodeArgs(tmpl *cmdShape, args []byte) (string, error) {
	runs := make([]string, len(tmpl.runs))
	for i := range runs {
		runs[i] = tmpl.run(i)
	}
	i := -1
	for len(args) > 0 {
		gap, n := binary.Uvarint(args)
		if n <= 0 {
			return "", errArgs
		}
		args = args[n:]
		tag, n := binary.Uvarint(args)
		if n <= 0 {
			return "", errArgs
		}
		args = args[n:]
		i += int(gap) + 1
		if i < 0 || i >= len(runs) {
			return "", errArgs
		}
		if tag&1 == 1 {
			j := int(tag >> 1)
			if j >= i {
				return "", errArgs
			}
			runs[i] = runs[j]
			continue
		}
		count := int(tag >> 1)
		if count == 0 || (count+1)/2 > len(args) {
			return "", errArgs
		}
		d := make([]byte, count)
		for k := range d {
			b := args[k/2]
			if k%2 == 0 {
				b >>= 4
			}
			b &= 0xf
			if b > 9 {
				return "", errArgs
			}
			d[k] = '0' + b
		}
		args = args[(count+1)/2:]
		runs[i] = string(d)
	}
	out := make([]byte, 0, len(tmpl.text)+16)
	last := 0
	for k, r := range tmpl.runs {
		out = append(out, tmpl.text[last:r[0]]...)
		out = append(out, runs[k]...)
		last = r[1]
	}
	return string(append(out, tmpl.text[last:]...)), nil
}

// templates caches cmd_templates, by shape and by number (rows are never
// changed: the cache is shared by the writer and readers).
type templates struct {
	mu     sync.Mutex
	byKey  map[uint64]*cmdShape
	byID   map[int32]*cmdShape
	nextID int32 // the writer's next number
}

// maxTemplates bounds the cache (it is emptied when full).
const maxTemplates = 1 << 16

func newTemplates() *templates {
	return &templates{byKey: map[uint64]*cmdShape{}, byID: map[int32]*cmdShape{}}
}

// adopt takes the templates of o, those of a database just reopened (the
// templates of a commit that failed are not in it).
func (t *templates) adopt(o *templates) {
	o.mu.Lock()
	byKey, byID, next := o.byKey, o.byID, o.nextID
	o.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byKey, t.byID, t.nextID = byKey, byID, next
}

func (t *templates) put(sh *cmdShape) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.byKey) >= maxTemplates {
		clear(t.byKey)
		clear(t.byID)
	}
	t.byKey[sh.key], t.byID[sh.id] = sh, sh
	t.nextID = max(t.nextID, sh.id+1)
}

// next is the number of the next template.
func (t *templates) next() int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nextID
}

// byShape returns the template of a shape, reading it from the table if
// needed (nil: none).
func (t *templates) byShape(ctx context.Context, db querier, key uint64) (*cmdShape, error) {
	t.mu.Lock()
	sh := t.byKey[key]
	t.mu.Unlock()
	if sh != nil {
		return sh, nil
	}
	return t.read(ctx, db, `tmpl = ?`, keyValue(key))
}

// number returns template id, reading it from the table if needed.
func (t *templates) number(ctx context.Context, db querier, id int32) (*cmdShape, error) {
	t.mu.Lock()
	sh := t.byID[id]
	t.mu.Unlock()
	if sh != nil {
		return sh, nil
	}
	return t.read(ctx, db, `id = ?`, id)
}

func (t *templates) read(ctx context.Context, db querier, where string, arg any) (*cmdShape, error) {
	rows, err := db.QueryContext(ctx, `SELECT id, text FROM cmd_templates WHERE `+where, arg)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, rows.Err()
	}
	var id int32
	var text string
	if err := rows.Scan(&id, &text); err != nil {
		return nil, err
	}
	s := shapeOf(text)
	s.id = id
	t.put(&s)
	return &s, nil
}

// cmdline is how a process row stores its command line: as text, or as a
// template and arguments.
type cmdline struct {
	text sql.NullString
	tmpl sql.NullInt32
	args []byte
}

// decode returns the command line ("" if the row has none).
func (c *cmdline) decode(ctx context.Context, db querier, t *templates) (string, bool, error) {
	if c.text.Valid {
		return c.text.String, true, nil
	}
	if !c.tmpl.Valid {
		return "", false, nil
	}
	sh, err := t.number(ctx, db, c.tmpl.Int32)
	if err != nil {
		return "", false, err
	}
	if sh == nil {
		return "", false, errors.New("command line template not found")
	}
	s, err := decodeArgs(sh, c.args)
	return s, err == nil, err
}
