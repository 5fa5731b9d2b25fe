package clickhouse

import (
	"context"
	"testing"

	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
)

// TestAttemptColumns: the live attempts table, made new and made before
// the exit columns then migrated, has the columns the fields package
// store declares (store.AttemptFields), with their types, and the store's
// own; a new one in their order.
func TestAttemptColumns(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	check := func(db string, ordered bool) {
		t.Helper()
		st, err := Open(ctx, Options{URL: srv.URL() + "?database=" + db, InsertEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		rows, err := st.Client().WithDatabase("system").Query(ctx, "SELECT name, type FROM system.columns WHERE database = "+
			Quote(db)+" AND table = 'attempts'", nil) // (in their order: 18.16 has no position)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		var order []string
		for _, c := range attemptColumns() {
			want[c.name] = st.schema.columnType(c)
			order = append(order, c.name)
		}
		n := 0
		for rows.Next() {
			name, typ := rows.String(), rows.String()
			if want[name] != typ {
				t.Errorf("%s: attempts.%s is %s, the fields declare %q", db, name, typ, want[name])
			}
			if ordered && n < len(order) && order[n] != name {
				t.Errorf("%s: column %d is %s, want %s", db, n, name, order[n])
			}
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n != len(want) {
			t.Errorf("%s: %d columns, want %d", db, n, len(want))
		}
	}
	check("fresh", true)
	// Made without its exit columns (the first schema's attempts), then
	// opened again.
	st, err := Open(ctx, Options{URL: srv.URL() + "?database=older", InsertEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, col := range exitColumnNames {
		if err := st.Client().Exec(ctx, "ALTER TABLE older.attempts DROP COLUMN "+col, nil); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	check("older", false)
}
