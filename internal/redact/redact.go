// Package redact masks the values of secrets in text that describes
// processes: command lines, java options, environment entries. The agent
// masks what it ships, spools and prints; the server masks what any agent
// sends it the same way (docs/security.md). The name of an option stays; its
// value becomes Mask.
package redact

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/taskscope/taskscope/internal/wire"
)

// DefaultPattern is the default of --redact-pattern, in the spirit of
// Spark's spark.redaction.regex and Hadoop's
// hadoop.security.sensitive-config-keys: an option or variable whose name
// matches it anywhere (any case) holds a secret.
const DefaultPattern = `(?i)secret|password|passwd|passphrase|token|access[._-]?key|account[._-]?key|credential|api[._-]?key|private[._-]?key|` +
	`session[._-]?key|signature|storepass|keypass|auth[._-]?key`

// Mask is what a secret's value becomes.
const Mask = "*****"

// maxCached bounds the names whose verdict is kept: a hostile agent that
// sends many distinct names costs the regular expression, never memory.
const maxCached = 1 << 16

// Masker masks the values of the options and variables whose names match
// its pattern. It is safe for concurrent use.
type Masker struct {
	re *regexp.Regexp
	// names caches the pattern's verdict per name (the same -D options
	// come with every JVM).
	names  sync.Map
	cached atomic.Int64
}

// New compiles pattern (a Go regular expression matched against names).
func New(pattern string) (*Masker, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("redaction pattern %q: %w", pattern, err)
	}
	if re.MatchString("") {
		return nil, fmt.Errorf("redaction pattern %q matches every name", pattern)
	}
	return &Masker{re: re}, nil
}

// Default is a Masker of DefaultPattern.
func Default() *Masker {
	m, err := New(DefaultPattern)
	if err != nil {
		panic(err)
	}
	return m
}

// Pattern is the masker's pattern.
func (m *Masker) Pattern() string { return m.re.String() }

// secretName reports whether name names a secret.
func (m *Masker) secretName(name string) bool {
	if name == "" {
		return false
	}
	if v, ok := m.names.Load(name); ok {
		return v.(bool)
	}
	hit := m.re.MatchString(name)
	if m.cached.Load() < maxCached {
		m.cached.Add(1)
		m.names.Store(strings.Clone(name), hit)
	}
	return hit
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// String returns s with the values of secrets masked, in every form command
// lines and scripts use:
//
//	-Dname=value  --name=value  -name=value  name=value  (the value after the first '=')
//	--name value  -name value   (the next word; not after -D, which sets a property)
//	scheme://user:password@host (a URL's password)
//	...?name=value&name=value, ...;name=value;... (parameters of URLs and
//	connection strings: after ?, &, ; or #, up to the next &, ;, # or quote)
//	jdbc:oracle:thin:user/password@host
//
// where name matches the pattern. A value that starts with a quote is masked
// up to its closing quote. Masking is idempotent: String(String(s)) ==
// String(s). Text without '=', '-' or "://" is returned as it is, without
// looking further.
func (m *Masker) String(s string) string {
	if m == nil || !strings.ContainsAny(s, "=-:") {
		return s
	}
	var out []byte // nil while nothing changed
	done := 0      // s[:done] is in out (or unchanged)
	replace := func(from, to int) {
		if out == nil {
			out = make([]byte, 0, len(s))
		}
		out = append(out, s[done:from]...)
		out = append(out, Mask...)
		done = to
	}
	maskNext := false
	var spans [4][2]int
	for i := 0; i < len(s); {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			break
		}
		end := i
		eqs, seps := 0, false // (for mayHoldSecrets, in the same pass)
		for ; end < len(s) && !isSpace(s[end]); end++ {
			switch s[end] {
			case '=':
				eqs++
			case '?', '&', ';', '#', '@':
				seps = true
			}
		}
		w := s[i:end]
		// Leading quotes do not change the name; a quoted word ends at its
		// closing quote.
		name := strings.TrimLeft(w, `"'`)
		var quote byte
		if len(name) < len(w) {
			quote = w[0]
		}
		off := i + len(w) - len(name)
		dashes := len(name) - len(strings.TrimLeft(name, "-"))
		name = name[dashes:]
		eq := strings.IndexByte(name, '=')
		flag := dashes > 0 && eq < 0 && (dashes > 1 || !strings.HasPrefix(name, "D")) && m.secretName(strings.TrimRight(name, `"'`))
		if maskNext && !flag {
			// The value of a flag that names a secret (unless it is
			// another such flag: --secret --password x).
			maskNext = false
			if w != Mask {
				end = valueEnd(s, i, end, 0)
				replace(i, end)
			}
			i = end
			continue
		}
		maskNext = flag
		if eq > 0 && isName(name[:eq]) {
			key := name[:eq]
			if dashes == 1 && strings.HasPrefix(key, "D") {
				key = key[1:] // -Dname=value
			}
			vstart := off + dashes + eq + 1
			if vstart < end && s[vstart:end] != Mask && m.secretName(key) {
				end = valueEnd(s, vstart, end, quote)
				replace(vstart, end)
				i = end
				continue
			}
		}
		if seps || eqs >= 2 {
			// A password before an @, or a parameter after one of
			// paramSeps (after an =, one that follows another =).
			for _, sp := range m.wordSecrets(spans[:0], w) {
				replace(i+sp[0], i+sp[1])
			}
		}
		i = end
	}
	if out == nil {
		return s
	}
	out = append(out, s[done:]...)
	return string(out)
}

// valueEnd is where the value that starts at s[from] ends: at the end of its
// word, or past its closing quote when it starts with one, or when its word
// started with quote and does not close it.
func valueEnd(s string, from, wordEnd int, quote byte) int {
	q, at := quote, from
	if c := s[from]; c == '"' || c == '\'' {
		q, at = c, from+1
	} else if q != 0 && strings.IndexByte(s[from:wordEnd], q) >= 0 {
		q = 0 // closed within the word
	}
	if q != 0 {
		if k := strings.IndexByte(s[at:], q); k >= 0 {
			end := at + k + 1
			// Up to the end of the word that holds the closing quote.
			for end < len(s) && !isSpace(s[end]) {
				end++
			}
			return end
		}
	}
	return wordEnd
}

// urlPassword finds the password of the URL whose authority starts at
// w[at]: user:password@host.
func urlPassword(w string, at int) (from, to int, ok bool) {
	auth := w[at:]
	if k := strings.IndexAny(auth, "/?#"); k >= 0 {
		auth = auth[:k]
	}
	a := strings.LastIndexByte(auth, '@')
	if a < 0 {
		return 0, 0, false
	}
	c := strings.IndexByte(auth[:a], ':')
	if c < 0 || auth[c+1:a] == Mask || c+1 == a {
		return 0, 0, false
	}
	return at + c + 1, at + a, true
}

// wordSecrets appends to spans the spans of secrets inside the word w, in
// order and apart: a URL's password, an Oracle JDBC URL's, the values of
// parameters that name secrets.
func (m *Masker) wordSecrets(spans [][2]int, w string) [][2]int {
	if j := strings.Index(w, "://"); j >= 0 {
		if from, to, ok := urlPassword(w, j+3); ok {
			spans = append(spans, [2]int{from, to})
		}
	}
	if from, to, ok := oraclePassword(w); ok {
		spans = append(spans, [2]int{from, to})
	}
	for p := 0; p < len(w); {
		from, to, ok := m.param(w, p)
		if !ok {
			break
		}
		spans = append(spans, [2]int{from, to})
		p = to
	}
	if len(spans) < 2 {
		return spans
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	out := spans[:1]
	for _, sp := range spans[1:] {
		last := &out[len(out)-1]
		if sp[0] < last[1] { // overlapping: one span
			last[1] = max(last[1], sp[1])
			continue
		}
		out = append(out, sp)
	}
	return out
}

// paramSeps start a parameter inside a word: a URL's query (?a=b&c=d) and
// fragment (#access_token=...), the key=value;key=value lists of
// connection strings (SQL Server's JDBC URLs, ODBC and ADO.NET), and a
// value that sets another (--conf=spark.authenticate.secret=x).
const paramSeps = "?&;#="

// paramEnds end a parameter's value (and quotes, which close the word's).
const paramEnds = "&;#'\""

// param finds, in w from w[at], the value of the first parameter whose
// name names a secret: name=value right after one of paramSeps. The value
// runs to the next of paramEnds (past its closing brace first when it
// starts with one: SQL Server's {a;b}); a value already masked is skipped.
func (m *Masker) param(w string, at int) (from, to int, ok bool) {
	for at < len(w) {
		k := strings.IndexAny(w[at:], paramSeps)
		if k < 0 {
			return 0, 0, false
		}
		start := at + k + 1
		at = start
		eq := start
		for eq < len(w) && isNameByte(w[eq]) {
			eq++
		}
		if eq == start || eq == len(w) || w[eq] != '=' || !m.secretName(w[start:eq]) {
			continue
		}
		from, to = eq+1, eq+1
		if to < len(w) && w[to] == '{' {
			if c := strings.IndexByte(w[to:], '}'); c >= 0 {
				to += c + 1
			} else {
				to = len(w)
			}
		}
		if e := strings.IndexAny(w[to:], paramEnds); e >= 0 {
			to += e
		} else {
			to = len(w)
		}
		if from == to || w[from:to] == Mask {
			at = to
			continue
		}
		return from, to, true
	}
	return 0, 0, false
}

// isName reports whether s is made of isNameByte alone (not a URL, say,
// whose parameters are found one by one).
func isName(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

// isNameByte reports whether c may be in a parameter's name (password,
// ssl_password, fs.s3a.secret.key, api-key, Password).
func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// oraclePassword finds the password of an Oracle JDBC URL's
// user/password@ (jdbc:oracle:thin:scott/tiger@db:1521/svc), which has
// no "://".
func oraclePassword(w string) (from, to int, ok bool) {
	const prefix = "jdbc:oracle:"
	k := strings.Index(w, prefix[5:])
	if k < 0 {
		k = strings.Index(w, "ORACLE:")
	}
	if k < 5 || !strings.EqualFold(w[k-5:k+len(prefix)-5], prefix) {
		return 0, 0, false
	}
	k -= 5
	rest := w[k+len("jdbc:oracle:"):]
	c := strings.IndexByte(rest, ':') // after the driver (thin, oci)
	if c < 0 {
		return 0, 0, false
	}
	base := k + len("jdbc:oracle:") + c + 1
	cred := w[base:]
	a := strings.IndexByte(cred, '@')
	if a < 0 {
		return 0, 0, false
	}
	s := strings.IndexByte(cred[:a], '/')
	if s < 0 || s+1 == a || cred[s+1:a] == Mask {
		return 0, 0, false
	}
	return base + s + 1, base + a, true
}

// Batch masks every text of b that comes from a process or a job's
// configuration: command lines, process names, java options, job names,
// NodeManagers' diagnostics and event messages. Identifiers (hosts, job, attempt and container ids) are
// left as they are.
func (m *Masker) Batch(b *wire.Batch) {
	if m == nil {
		return
	}
	for i := range b.Processes {
		p := &b.Processes[i]
		p.Cmdline = m.String(p.Cmdline)
		p.Comm = m.String(p.Comm)
	}
	for i := range b.Attempts {
		a := &b.Attempts[i]
		a.JavaOpts = m.String(a.JavaOpts)
		a.JobName = m.String(a.JobName)
		// A NodeManager's diagnostics of a container killed for its
		// memory dump its process tree, command lines included.
		a.ExitDiagnostics = m.String(a.ExitDiagnostics)
	}
	for i := range b.Events {
		b.Events[i].Message = m.String(b.Events[i].Message)
	}
}
