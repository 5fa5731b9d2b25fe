package clickhouse

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/taskscope/taskscope/internal/store/clickhouse/chtest"
	"github.com/taskscope/taskscope/internal/testsrv"
)

func newTestClient(t *testing.T, s *chtest.Server, db string, opt ClientOptions) *Client {
	t.Helper()
	c, err := NewClient(s.URL()+"?database="+db, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.WithDatabase("default").Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+db, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

// hostile are strings that must come back as they went: quotes,
// backslashes, control bytes, invalid UTF-8, SQL.
var hostile = []string{"", "plain", `it's`, `back\slash`, `\'`, `'\`, "nul\x00byte", "\xff\xfe invalid", "日本語",
	"line\nbreak\ttab", `'); DROP TABLE t; --`, `%_\`, strings.Repeat("x", 70000)}

func TestClientRoundTrip(t *testing.T) {
	s := chtest.Start(t)
	c := newTestClient(t, s, "rt", ClientOptions{})
	ctx := context.Background()
	if err := c.Exec(ctx, `CREATE TABLE t (day Date, u8 UInt8, u16 UInt16, u32 UInt32, u64 UInt64, i32 Int32, i64 Int64,
		f Float64, s String) ENGINE = MergeTree PARTITION BY day ORDER BY u64`, nil); err != nil {
		t.Fatal(err)
	}
	var b Block
	ms := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMilli()
	for i, h := range hostile {
		b.Row()
		b.Date(ms)
		b.UInt8(uint8(i))
		b.UInt16(65535)
		b.UInt32(1 << 31)
		b.UInt64(uint64(i) | 1<<63)
		b.Int32(-5)
		b.Int64(-1 << 62)
		b.Float64(0.1 * float64(i))
		b.String(h)
	}
	if err := c.Insert(ctx, "t", []string{"day", "u8", "u16", "u32", "u64", "i32", "i64", "f", "s"}, b.Bytes(), nil); err != nil {
		t.Fatal(err)
	}
	rows, err := c.Query(ctx, "SELECT day, u8, u16, u32, u64, i32, i64, f, s, toString(day) FROM t ORDER BY u64", nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		day, u8, u16, u32, u64, i32, i64, f, str, dayText := rows.UInt16(), rows.UInt8(), rows.UInt16(), rows.UInt32(), rows.UInt64(),
			rows.Int32(), rows.Int64(), rows.Float64(), rows.String(), rows.String()
		i := int(u8)
		if day != DayOf(ms) || dayText != "2026-11-30" || u16 != 65535 || u32 != 1<<31 || u64 != uint64(i)|1<<63 || i32 != -5 ||
			i64 != -1<<62 || f != 0.1*float64(i) || str != hostile[i] {
			t.Errorf("row %d came back as %v %v %v %v %v %v %v %v %.40q %s", i, day, u8, u16, u32, u64, i32, i64, f, str, dayText)
		}
		n++
	}
	if err := rows.Err(); err != nil || n != len(hostile) {
		t.Fatalf("%d rows, %v", n, err)
	}
	// The same strings as literals in a query's text.
	for _, h := range hostile {
		rows, err := c.Query(ctx, "SELECT "+Quote(h)+", count() FROM t WHERE s = "+Quote(h)+" AND s LIKE "+Quote("%"+LikeEscape(h)+"%"), nil)
		if err != nil {
			t.Fatalf("%.40q: %v", h, err)
		}
		back, count := rows.String(), rows.UInt64()
		if back != h || count != 1 || rows.Err() != nil {
			t.Errorf("%.40q as a literal: %.40q, %d rows match, %v", h, back, count, rows.Err())
		}
	}
	// LIKE's wildcards escaped match only themselves.
	rows, err = c.Query(ctx, "SELECT count() FROM t WHERE s LIKE "+Quote("%"+LikeEscape("%_")+"%"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := rows.UInt64(); n != 1 {
		t.Errorf("LIKE %%_ escaped matches %d rows, want 1", n)
	}
}

func TestClientErrors(t *testing.T) {
	s := chtest.Start(t)
	c := newTestClient(t, s, "errs", ClientOptions{MaxResponse: 1000})
	ctx := context.Background()
	for _, tc := range []struct {
		q    string
		code int
	}{
		{"SELECT * FROM no_such_table", CodeUnknownTable},
		{"SELEKT 1", CodeSyntaxError},
		{"SELECT no_such_column", CodeUnknownIdentifer},
	} {
		_, err := c.Query(ctx, tc.q, nil)
		var ex *Exception
		if !errors.As(err, &ex) || ex.Code != tc.code || ex.Status < 400 || ex.Message == "" {
			t.Errorf("%s: %v (%+v), want code %d", tc.q, err, ex, tc.code)
		}
	}
	// An error after rows were made is an error, not rows.
	_, err := c.Query(ctx, "SELECT throwIf(number = 100000) FROM system.numbers LIMIT 200000", Settings{"max_block_size": "1000"})
	var ex *Exception
	if !errors.As(err, &ex) || ex.Code == 0 {
		t.Errorf("an exception half way through: %v", err)
	}
	// An answer beyond MaxResponse is refused.
	if _, err := c.Query(ctx, "SELECT number FROM system.numbers LIMIT 1000", nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("8000 bytes with MaxResponse 1000: %v", err)
	}
	// A deadline ends a slow query.
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err = c.Query(tctx, "SELECT sleep(3)", nil)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 2*time.Second {
		t.Errorf("sleep(3) with a deadline of 300 ms: %v after %s", err, time.Since(t0))
	}
	// A server that is gone.
	s.Kill()
	if _, err := c.Query(ctx, "SELECT 1", nil); err == nil || !strings.Contains(err.Error(), s.Addr()) {
		t.Errorf("a killed server: %v", err)
	}
}

func TestServerVersion(t *testing.T) {
	s := chtest.Start(t)
	c := newTestClient(t, s, "default", ClientOptions{})
	v, err := c.ServerVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("version %s, features %+v", v, FeaturesOf(v))
	if v.Major < 18 {
		t.Errorf("version %s", v)
	}
	if v.Major == 18 && FeaturesOf(v) != (Features{}) {
		t.Errorf("18.x has none of the newer features, not %+v", FeaturesOf(v))
	}
}

// TestTooManyParts: with merges stopped and a table that refuses a third
// part, an insert is refused with code 252; Insert waits and sends it
// again, and once merges run again it goes in, once.
func TestTooManyParts(t *testing.T) {
	s := chtest.Start(t)
	c := newTestClient(t, s, "parts", ClientOptions{InsertRetry: time.Minute})
	ctx := context.Background()
	if err := c.Exec(ctx, "CREATE TABLE t (x UInt64) ENGINE = MergeTree ORDER BY x SETTINGS parts_to_throw_insert = 3, parts_to_delay_insert = 2", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, "SYSTEM STOP MERGES", nil); err != nil {
		t.Fatal(err)
	}
	insert := func(i int) error {
		var b Block
		b.UInt64(uint64(i))
		b.Row()
		return c.Insert(ctx, "t", []string{"x"}, b.Bytes(), nil)
	}
	i := 0
	for ; i < 10; i++ {
		// Without retries: the raw refusal.
		var b Block
		b.UInt64(uint64(i))
		_, err := c.do(ctx, "INSERT INTO t (x) FORMAT RowBinary", b.Bytes(), nil)
		var ex *Exception
		if errors.As(err, &ex) && ex.Code == CodeTooManyParts {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if i == 10 {
		t.Fatal("no insert was refused for too many parts")
	}
	var done atomic.Bool
	var ierr error
	go func() { ierr = insert(1000); done.Store(true) }()
	before := c.InsertRetries()
	testsrv.WaitUntil(t, "the insert to be refused and retried", 30*time.Second, func() bool { return c.InsertRetries() > before })
	if done.Load() {
		t.Fatal("the insert went in while merges were stopped")
	}
	// Merges again (18.16's background merges take their time to pick
	// three small parts: OPTIMIZE merges them now).
	if err := c.Exec(ctx, "SYSTEM START MERGES", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, "OPTIMIZE TABLE t", nil); err != nil {
		t.Fatal(err)
	}
	testsrv.WaitUntil(t, "the insert to go in", 60*time.Second, done.Load)
	if ierr != nil {
		t.Fatal(ierr)
	}
	rows, err := c.Query(ctx, "SELECT count(), countIf(x = 1000) FROM t", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, once := rows.UInt64(), rows.UInt64(); n != uint64(i+1) || once != 1 {
		t.Errorf("%d rows, the retried one %d times; want %d and once", n, once, i+1)
	}
}

func TestNewClientURL(t *testing.T) {
	for _, tc := range []struct {
		url, db, err string
		settings     int
	}{
		{"http://h:8123/?database=ts", "ts", "", 0},
		{"http://u:p@h:8123?database=ts&max_execution_time=60", "ts", "", 1},
		{"http://h:8123/", "default", "", 0},
		{"ftp://h/", "", "scheme", 0},
		{"http:///?database=x", "", "no host", 0},
		{"http://h:8123/ts", "", "path", 0},
		{"http://h:8123/?database=a%3BDROP", "", "database", 0},
		{"http://u:secret@h:8123/ts", "", "path", 0},
	} {
		c, err := NewClient(tc.url, ClientOptions{})
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error about %s", tc.url, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: the error shows the password: %v", tc.url, err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.url, err)
		case c.Database() != tc.db || len(c.defaults) != tc.settings:
			t.Errorf("%s: database %q, settings %v", tc.url, c.Database(), c.defaults)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{"18.16.1": {18, 16, 1}, "23.8.2.7": {23, 8, 2}, "19.6": {19, 6, 0}} {
		if v, err := ParseVersion(in); err != nil || v != want {
			t.Errorf("%s: %v, %v", in, v, err)
		}
	}
	for _, in := range []string{"", "18", "x.y", "18.-1", "18.1a", "99999999.1"} {
		if _, err := ParseVersion(in); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
	f := FeaturesOf(Version{19, 6, 0})
	if !f.TTL || f.Codecs {
		t.Errorf("19.6: %+v", f)
	}
	if f := FeaturesOf(Version{23, 8, 0}); !f.TTL || !f.Codecs || !f.LowCardinality {
		t.Errorf("23.8: %+v", f)
	}
}

func TestParseException(t *testing.T) {
	for text, want := range map[string]Exception{
		"Code: 47, e.displayText() = DB::Exception: Unknown identifier: nosuch, e.what() = DB::Exception\n": {Code: 47, Message: "Unknown identifier: nosuch"},
		"Code: 60. DB::Exception: Table default.x does not exist. (UNKNOWN_TABLE) (version 23.8.2.7 (official build))": {Code: 60,
			Message: "Table default.x does not exist. (UNKNOWN_TABLE) (version 23.8.2.7 (official build))"},
		"Bad request":  {Message: "Bad request"},
		"Code: x, ...": {Message: "Code: x, ..."},
	} {
		if got := ParseException(text); *got != want {
			t.Errorf("%q: %+v, want %+v", text, *got, want)
		}
	}
}

func FuzzParseException(f *testing.F) {
	f.Add("Code: 252, e.displayText() = DB::Exception: Too many parts (300), e.what() = DB::Exception")
	f.Add("Code: 1")
	f.Add("Code: 99999999999999999999")
	f.Fuzz(func(t *testing.T, s string) {
		e := ParseException(s)
		if e.Code < 0 || e.Code > 999_999_999 {
			t.Errorf("code %d", e.Code)
		}
		if e.Code == 0 && e.Message != strings.TrimSpace(s) {
			t.Errorf("without a code the message is the text: %q", e.Message)
		}
	})
}

// FuzzRows reads any bytes as rows of every type: no panic, no read out
// of bounds, and a string never longer than what is left.
func FuzzRows(f *testing.F) {
	var b Block
	b.UInt8(1)
	b.UInt64(2)
	b.String("three")
	b.Int32(-4)
	b.Blob([]byte{5})
	f.Add(b.Bytes())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &Rows{buf: data}
		for i := 0; r.Next() && i < 1000; i++ {
			switch i % 5 {
			case 0:
				r.UInt8()
			case 1:
				r.UInt64()
			case 2:
				if s := r.Bytes(); len(s) > len(data) {
					t.Fatalf("a string of %d bytes from %d", len(s), len(data))
				}
			case 3:
				r.Int32()
			case 4:
				r.Float64()
			}
		}
		if r.pos > len(data) {
			t.Fatalf("read to %d of %d", r.pos, len(data))
		}
	})
}

// FuzzQuote: a quoted string reads back as itself by ClickHouse's rules
// (a backslash escapes the next byte), and ends at its closing quote.
func FuzzQuote(f *testing.F) {
	for _, h := range hostile {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := Quote(s)
		if len(q) < 2 || q[0] != '\'' || q[len(q)-1] != '\'' {
			t.Fatalf("%q", q)
		}
		var out []byte
		body := q[1 : len(q)-1]
		for i := 0; i < len(body); i++ {
			switch body[i] {
			case '\\':
				i++
				if i == len(body) {
					t.Fatalf("%q ends in a lone backslash", q)
				}
				out = append(out, body[i])
			case '\'':
				t.Fatalf("%q: an unescaped quote inside", q)
			default:
				out = append(out, body[i])
			}
		}
		if string(out) != s {
			t.Fatalf("%q reads back as %q", s, out)
		}
	})
}

func ExampleQuote() {
	fmt.Println(Quote(`it's a \ test`))
	// Output: 'it\'s a \\ test'
}

// resetServer is an HTTP server on loopback that answers "ok" to a
// request when answer(connection, request on it) says so (both counted
// from 1), and else resets the connection (RST) once it has read the
// request. It counts the connections it accepted.
func resetServer(t *testing.T, answer func(conn, req int) bool) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns := &atomic.Int32{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(conns.Add(1))
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for req := 1; ; req++ {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, r.Body)
					if !answer(n, req) {
						c.(*net.TCPConn).SetLinger(0) // close with a reset
						return
					}
					if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/?database=db", conns
}

// TestResendAfterReset: a request whose connection is reset is sent again
// on a new connection, up to twice; the third reset is the error.
func TestResendAfterReset(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		answer func(conn, req int) bool
		reqs   int   // requests sent
		conns  int32 // connections the server saw
		resent int64
		fails  bool
	}{
		{"first two connections reset", func(conn, req int) bool { return conn > 2 }, 1, 3, 2, false},
		{"every connection reset", func(conn, req int) bool { return false }, 1, 3, 2, true},
		// The second request goes on the kept-alive connection, which the
		// server resets: it is sent again on a new one.
		{"kept-alive connection reset", func(conn, req int) bool { return req == 1 }, 2, 2, 1, false},
		{"no reset", func(conn, req int) bool { return true }, 3, 1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, conns := resetServer(t, tc.answer)
			c, err := NewClient(u, ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < tc.reqs; i++ {
				err = c.Insert(ctx, "t", []string{"a"}, []byte{1}, nil)
				if i < tc.reqs-1 && err != nil {
					t.Fatalf("request %d: %v", i+1, err)
				}
			}
			if tc.fails {
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("err = %v, want a connection reset", err)
				}
			} else if err != nil {
				t.Errorf("err = %v", err)
			}
			if got := conns.Load(); got != tc.conns {
				t.Errorf("%d connections, want %d", got, tc.conns)
			}
			if got := c.Resent(); got != tc.resent {
				t.Errorf("sent again %d times, want %d", got, tc.resent)
			}
		})
	}
}
