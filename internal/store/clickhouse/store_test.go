package clickhouse

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/store/storetest"
)

var testDB atomic.Int64

// TestConformance runs the conformance suite against one ClickHouse
// server started for it, each test in a database of its own.
func TestConformance(t *testing.T) {
	srv := chtest.Start(t)
	open := func(t *testing.T, db string, c store.Clock) store.Store {
		s, err := Open(context.Background(), Options{URL: srv.URL() + "?database=" + db, Clock: c, InsertEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	dbs := map[store.Store]string{}
	storetest.Run(t, storetest.Factory{
		Open: func(t *testing.T, c store.Clock) store.Store {
			db := "conf" + itoa(testDB.Add(1))
			s := open(t, db, c)
			dbs[s] = db
			return s
		},
		Reopen: func(t *testing.T, old store.Store, c store.Clock) store.Store {
			db := dbs[old]
			if err := old.Close(); err != nil {
				t.Fatal(err)
			}
			s := open(t, db, c)
			dbs[s] = db
			return s
		},
	})
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestSchemaVersion: a store writes its schema's version into new tables,
// opens tables of its own version again, and refuses tables of another.
func TestSchemaVersion(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	url := srv.URL() + "?database=ver"
	s, err := Open(ctx, Options{URL: url, InsertEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	c, err := NewClient(url, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	version := func() string {
		rows, err := c.Query(ctx, "SELECT value FROM meta FINAL WHERE key = 'schema_version'", nil)
		if err != nil {
			t.Fatal(err)
		}
		return rows.String()
	}
	if v := version(); v != SchemaVersion {
		t.Fatalf("schema_version %q in meta, want %q", v, SchemaVersion)
	}
	s, err = Open(ctx, Options{URL: url, InsertEvery: -1})
	if err != nil {
		t.Fatalf("opening its own tables again: %v", err)
	}
	s.Close()
	var b Block
	b.Row()
	b.String("schema_version")
	b.String("999")
	if err := c.Insert(ctx, "meta", []string{"key", "value"}, b.Bytes(), nil); err != nil {
		t.Fatal(err)
	}
	if v := version(); v != "999" {
		t.Fatalf("schema_version %q after writing 999", v)
	}
	if _, err := Open(ctx, Options{URL: url, InsertEvery: -1}); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("opening tables of version 999: %v, want ErrSchemaVersion", err)
	} else {
		t.Log(err)
	}
}
