package hsperf

import (
	"encoding/binary"
)

// BuildEntry is one entry of a file made by Build.
type BuildEntry struct {
	Name  string
	Long  int64  // for TypeLong
	Str   string // for TypeByte
	Type  byte   // TypeLong (default) or TypeByte
	Units uint8
}

// Build makes a version 2 hsperfdata file of the given entries, as HotSpot
// lays it out (for tests and fixtures), padded to size bytes (at least what
// the entries take).
func Build(order binary.ByteOrder, size int, entries []BuildEntry) []byte {
	b := make([]byte, PrologueSize, max(size, 4096))
	binary.BigEndian.PutUint32(b, Magic)
	if order == binary.BigEndian {
		b[4] = 0
	} else {
		b[4] = 1
	}
	b[5], b[6], b[7] = 2, 0, 1
	for _, e := range entries {
		typ := e.Type
		if typ == 0 {
			typ = TypeLong
		}
		name := append([]byte(e.Name), 0)
		nameOff := entryHeaderSize
		dataOff := nameOff + len(name)
		var data []byte
		vec := 0
		if typ == TypeLong {
			dataOff = (dataOff + 7) &^ 7
			data = make([]byte, 8)
			order.PutUint64(data, uint64(e.Long))
		} else {
			data = append([]byte(e.Str), 0)
			vec = len(data)
		}
		length := (dataOff + len(data) + 7) &^ 7
		ent := make([]byte, length)
		order.PutUint32(ent[0:], uint32(length))
		order.PutUint32(ent[4:], uint32(nameOff))
		order.PutUint32(ent[8:], uint32(vec))
		ent[12], ent[13], ent[14], ent[15] = typ, 0, e.Units, 3
		order.PutUint32(ent[16:], uint32(dataOff))
		copy(ent[nameOff:], name)
		copy(ent[dataOff:], data)
		b = append(b, ent...)
	}
	used := len(b)
	for len(b) < size {
		b = append(b, 0)
	}
	order.PutUint32(b[8:], uint32(used))
	order.PutUint64(b[16:], 1)
	order.PutUint32(b[24:], PrologueSize)
	order.PutUint32(b[28:], uint32(len(entries)))
	return b
}
