// Package clickhouse is the store on ClickHouse, over its HTTP interface:
// that interface works from Debian's clickhouse-server 18.16 (which these
// machines install) to today's releases, where the native protocol's Go
// clients cannot insert into 18.16. Queries go as text with their settings
// as URL parameters; inserts as HTTP POSTs of RowBinary in large blocks.
package clickhouse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/taskscope/taskscope/internal/store"
)

// Settings are ClickHouse settings for one request (URL parameters).
type Settings map[string]string

// ClientOptions configure a Client.
type ClientOptions struct {
	// MaxResponse bounds the bytes read of one answer (default 1 GiB): a
	// query whose answer is larger fails, rather than taking the memory.
	MaxResponse int64
	// Timeout bounds a request that has no deadline of its own (default
	// 5 minutes; max_execution_time bounds queries on the server too).
	Timeout time.Duration
	// InsertRetry bounds how long an insert refused for too many parts
	// (code 252) is tried again, with backoff (default 2 minutes).
	InsertRetry time.Duration
	// HTTP is the client to use (default: one with keep-alive to the
	// server and a 5 s connect timeout).
	HTTP *http.Client
}

// Client talks to one ClickHouse server over HTTP. Safe for concurrent
// use.
type Client struct {
	base     string // scheme://host:port/
	host     string
	database string
	user     string
	password string
	defaults Settings // settings of the URL, sent with every request
	opt      ClientOptions
	http     *http.Client
	fresh    *http.Client  // a request sent again after a reset: on a new connection
	retries  *atomic.Int64 // inserts sent again (too many parts)
	resent   *atomic.Int64 // requests sent again after a reset connection
}

// maxResends is how many times a request whose connection was reset or
// closed before any answer is sent again, each time on a new connection.
const maxResends = 2

// maxErrorBody bounds what is read of an error's body.
const maxErrorBody = 64 << 10

// NewClient parses a URL of the form http://[user[:password]@]host:port/?database=NAME[&setting=value...]
// (https too). Other parameters are settings sent with every request.
func NewClient(rawURL string, opt ClientOptions) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("ClickHouse URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("ClickHouse URL %q: the scheme must be http or https", redact(u))
	}
	if u.Host == "" {
		return nil, fmt.Errorf("ClickHouse URL %q: no host", redact(u))
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("ClickHouse URL %q: give the database as ?database=NAME, not as a path", redact(u))
	}
	c := &Client{base: u.Scheme + "://" + u.Host + "/", host: u.Host, defaults: Settings{}, opt: opt, retries: &atomic.Int64{},
		resent: &atomic.Int64{}}
	if u.User != nil {
		c.user = u.User.Username()
		c.password, _ = u.User.Password()
	}
	for k, vs := range u.Query() {
		if len(vs) == 0 {
			continue
		}
		if k == "database" {
			c.database = vs[len(vs)-1]
			continue
		}
		c.defaults[k] = vs[len(vs)-1]
	}
	if c.database == "" {
		c.database = "default"
	}
	if !validIdent(c.database) {
		return nil, fmt.Errorf("ClickHouse URL: database %q: letters, digits and _ only, not starting with a digit", c.database)
	}
	if c.opt.MaxResponse <= 0 {
		c.opt.MaxResponse = 1 << 30
	}
	if c.opt.Timeout <= 0 {
		c.opt.Timeout = 5 * time.Minute
	}
	if c.opt.InsertRetry <= 0 {
		c.opt.InsertRetry = 2 * time.Minute
	}
	c.http = opt.HTTP
	if c.http == nil {
		c.http = &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 32,
			IdleConnTimeout:     2 * time.Second, // below the server's keep_alive_timeout (3 s by default)
		}}
	}
	// Requests sent again go through a copy of the transport that keeps
	// no connection (so they dial anew); with a transport of another kind,
	// the idle connections are closed before a request is sent again.
	c.fresh = c.http
	if tr, ok := c.http.Transport.(*http.Transport); ok {
		t := tr.Clone()
		t.DisableKeepAlives = true
		fc := *c.http
		fc.Transport = t
		c.fresh = &fc
	}
	return c, nil
}

// redact is u without its password, for messages.
func redact(u *url.URL) string {
	if u.User == nil {
		return u.String()
	}
	cp := *u
	cp.User = url.User(u.User.Username())
	return cp.String()
}

// Database is the database the URL names ("default" if none).
func (c *Client) Database() string { return c.database }

// Host is the server's host:port.
func (c *Client) Host() string { return c.host }

// WithHost is a client of another server (a replica or shard of the same
// cluster) with the same credentials, database, settings and options.
func (c *Client) WithHost(hostPort string) *Client {
	cp := *c
	scheme, _, _ := strings.Cut(c.base, "://")
	cp.base, cp.host = scheme+"://"+hostPort+"/", hostPort
	return &cp
}

// WithDatabase is the client of another database of the same server.
func (c *Client) WithDatabase(db string) *Client {
	cp := *c
	cp.database = db
	return &cp
}

// InsertRetries is how many times inserts were sent again because the
// server had too many parts (this client and those made from it).
func (c *Client) InsertRetries() int64 { return c.retries.Load() }

// Resent is how many times requests were sent again because their
// connection was reset or closed before an answer (this client and those
// made from it).
func (c *Client) Resent() int64 { return c.resent.Load() }

// Exec runs a statement that answers nothing worth reading (DDL, ALTER,
// INSERT ... SELECT).
func (c *Client) Exec(ctx context.Context, query string, s Settings) error {
	_, err := c.do(ctx, query, nil, s)
	return err
}

// Query runs a SELECT and returns its rows in RowBinary (the query must
// not name a format: FORMAT RowBinary is appended). The whole answer is
// read, within MaxResponse, and the server is asked to send it only once
// the query has finished (wait_end_of_query), so that an error met half
// way is an HTTP error, not rows followed by an exception's text.
func (c *Client) Query(ctx context.Context, query string, s Settings) (*Rows, error) {
	st := Settings{"wait_end_of_query": "1"}
	for k, v := range s {
		st[k] = v
	}
	body, err := c.do(ctx, query+"\nFORMAT RowBinary", nil, st)
	if err != nil {
		return nil, err
	}
	return &Rows{buf: body}, nil
}

// Insert posts rows, RowBinary of the columns cols of table, as one
// INSERT: one block (up to max_insert_block_size rows), so one part per
// partition it touches. An insert refused for too many parts (code 252,
// the merges are behind) is sent again with backoff, up to InsertRetry:
// nothing of it was written.
func (c *Client) Insert(ctx context.Context, table string, cols []string, rows []byte, s Settings) error {
	q := "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") FORMAT RowBinary"
	deadline := time.Now().Add(c.opt.InsertRetry)
	wait := 100 * time.Millisecond
	for {
		_, err := c.do(ctx, q, rows, s)
		var ex *Exception
		if err == nil || !errors.As(err, &ex) || ex.Code != CodeTooManyParts || time.Now().After(deadline) {
			return err
		}
		// Full jitter: inserters that were refused together do not come
		// back together.
		c.retries.Add(1)
		d := time.Duration(rand.Int64N(int64(wait))) + time.Millisecond
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (waiting to insert again after: %v)", ctx.Err(), err)
		case <-time.After(d):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// do sends one request: the query in the URL with data as the body, or
// (without data) the query as the body.
func (c *Client) do(ctx context.Context, query string, data []byte, s Settings) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opt.Timeout)
		defer cancel()
	}
	params := url.Values{"database": {c.database}}
	for k, v := range c.defaults {
		params.Set(k, v)
	}
	for k, v := range s {
		params.Set(k, v)
	}
	body := data
	if data == nil {
		body = []byte(query)
	} else {
		params.Set("query", query)
	}
	var resp *http.Response
	hc := c.http
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"?"+params.Encode(), bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		if c.user != "" {
			req.SetBasicAuth(c.user, c.password)
		}
		resp, err = hc.Do(req)
		if err == nil {
			break
		}
		// A connection reset, or closed by the server as the request went
		// (a kept-alive one it had timed out, a server restarting): the
		// request is sent again, up to maxResends times, each on a new
		// connection. Every statement the store sends may go twice: reads,
		// DDL IF NOT EXISTS, and inserts, whose rows are kept once (every
		// table is a ReplacingMergeTree keyed by what names a row; a
		// replicated table also drops a block it has already seen).
		if try < maxResends && ctx.Err() == nil && connectionLost(err) {
			c.resent.Add(1)
			if hc = c.fresh; hc == c.http {
				c.http.CloseIdleConnections()
			}
			continue
		}
		if try > 0 {
			err = fmt.Errorf("ClickHouse %s (sent %d times): %w", c.host, try+1, err)
		} else {
			err = fmt.Errorf("ClickHouse %s: %w", c.host, err)
		}
		if ctx.Err() != nil {
			return nil, err // the caller's deadline, or its cancel
		}
		return nil, store.Unavailable("cannot reach ClickHouse", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		ex := parseException(resp, msg)
		err := fmt.Errorf("ClickHouse %s: %w (in %s)", c.host, ex, abbrev(query))
		if ex.unreachable() {
			return nil, store.Unavailable("a ClickHouse server of the cluster cannot be reached", err)
		}
		return nil, err
	}
	// Read into a buffer kept from an earlier answer, then copied out at
	// its size: the answer's length is not known (chunked), and growing
	// a new buffer to megabytes took more time than the query (a job of
	// 10,000 attempts).
	buf := answers.Get().(*bytes.Buffer)
	defer putAnswer(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, c.opt.MaxResponse+1)); err != nil {
		return nil, fmt.Errorf("ClickHouse %s: reading the answer: %w", c.host, err)
	}
	if int64(buf.Len()) > c.opt.MaxResponse {
		return nil, fmt.Errorf("ClickHouse %s: %w: more than %d bytes (in %s)", c.host, ErrTooLarge, c.opt.MaxResponse, abbrev(query))
	}
	return append([]byte(nil), buf.Bytes()...), nil
}

// answers are buffers answers are read into (do).
var answers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxKeptAnswer bounds the buffers kept in answers.
const maxKeptAnswer = 64 << 20

func putAnswer(b *bytes.Buffer) {
	if b.Cap() <= maxKeptAnswer {
		answers.Put(b)
	}
}

// connectionLost reports whether err is a connection that broke before
// any answer came: reset by the peer, closed (EOF), or written to after
// the peer closed it.
func connectionLost(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.EPIPE)
}

// ErrTooLarge is an answer larger than MaxResponse.
var ErrTooLarge = errors.New("answer too large")

// abbrev is the start of a query, for messages.
func abbrev(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 100 {
		q = q[:100] + "..."
	}
	return q
}

// Version is a server's version.
type Version struct{ Major, Minor, Patch int }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v is major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// ParseVersion parses what version() answers ("18.16.1", "23.8.2.7").
func ParseVersion(s string) (Version, error) {
	var v Version
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) < 2 {
		return v, fmt.Errorf("ClickHouse version %q: want major.minor[.patch...]", s)
	}
	nums := []*int{&v.Major, &v.Minor, &v.Patch}
	for i := 0; i < len(parts) && i < 3; i++ {
		n := 0
		if parts[i] == "" || len(parts[i]) > 6 {
			return v, fmt.Errorf("ClickHouse version %q: not a number: %q", s, parts[i])
		}
		for _, r := range parts[i] {
			if r < '0' || r > '9' {
				return v, fmt.Errorf("ClickHouse version %q: not a number: %q", s, parts[i])
			}
			n = n*10 + int(r-'0')
		}
		*nums[i] = n
	}
	return v, nil
}

// ServerVersion asks the server its version (the store's database need
// not exist yet).
func (c *Client) ServerVersion(ctx context.Context) (Version, error) {
	rows, err := c.WithDatabase("system").Query(ctx, "SELECT version()", nil)
	if err != nil {
		return Version{}, err
	}
	s := rows.String()
	if err := rows.Err(); err != nil {
		return Version{}, err
	}
	return ParseVersion(s)
}

// Features are what the store uses of a server beyond 18.16's, by version.
// The thresholds are where each is documented as available without an
// experimental setting; only 18.16 can be installed here, so the newer
// paths are checked by their DDL's text, not against a newer server.
type Features struct {
	Codecs         bool // column CODEC(...) (19.x; taken from 20.1)
	TTL            bool // table TTL (19.6)
	LowCardinality bool // LowCardinality(String) without allow_experimental_low_cardinality_type (taken from 20.1)
}

// FeaturesOf is what a version has.
func FeaturesOf(v Version) Features {
	return Features{Codecs: v.AtLeast(20, 1), TTL: v.AtLeast(19, 6), LowCardinality: v.AtLeast(20, 1)}
}

// validIdent reports whether s is a plain identifier (databases and
// clusters named by users go into DDL unquoted).
func validIdent(s string) bool {
	if s == "" || len(s) > 64 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
