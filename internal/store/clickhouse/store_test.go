package clickhouse

import (
	"context"
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
