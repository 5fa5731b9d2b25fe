// Package auth is who may do what on a taskscope server: bearer tokens
// (agents' ingest tokens, bound to a host or not; API tokens of scripts,
// naming a user), the user a trusted SSO proxy names in a header, and the
// access file that says which jobs a user sees (docs/security.md).
package auth

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

// HashPrefix starts a token stored as its SHA-256 rather than as itself.
const HashPrefix = "sha256:"

// Token is one line of a token file: the token's hash and the words after
// it (an ingest token's host; an API token's user and groups).
type Token struct {
	hash   [sha256.Size]byte
	Fields []string
}

// Tokens are the tokens of a file. A nil or empty Tokens accepts nothing.
type Tokens struct {
	list []Token
	path string
}

// Len is the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.list)
}

// LoadTokens reads a token file: one token per line, then the words that
// go with it, separated by blanks; blank lines and lines starting with #
// are ignored. A token written as sha256:<64 hex digits> is that token's
// SHA-256 (Hash makes the line): the file then holds no token at all.
// Each line must have from minFields to maxFields words after its token.
func LoadTokens(path string, minFields, maxFields int) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read token file: %w", err)
	}
	defer f.Close()
	t, err := ParseTokens(f, minFields, maxFields)
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	t.path = path
	return t, nil
}

// ParseTokens reads token lines from r (see LoadTokens).
func ParseTokens(r io.Reader, minFields, maxFields int) (*Tokens, error) {
	t := &Tokens{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		words := strings.Fields(sc.Text())
		if len(words) == 0 || strings.HasPrefix(words[0], "#") {
			continue
		}
		if n := len(words) - 1; n < minFields || n > maxFields {
			return nil, fmt.Errorf("line %d: %d words after the token, want %d to %d", line, n, minFields, maxFields)
		}
		var tok Token
		if h, ok := strings.CutPrefix(words[0], HashPrefix); ok {
			b, err := hex.DecodeString(h)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("line %d: %s must be followed by 64 hex digits", line, HashPrefix)
			}
			copy(tok.hash[:], b)
		} else {
			tok.hash = sha256.Sum256([]byte(words[0]))
		}
		tok.Fields = words[1:]
		t.list = append(t.list, tok)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.list) == 0 {
		return nil, errors.New("holds no token")
	}
	return t, nil
}

// Lookup returns the token that secret is. It compares secret's hash with
// every token's in constant time, always all of them: the time it takes
// says nothing of which matched or how closely.
func (t *Tokens) Lookup(secret string) (*Token, bool) {
	if t == nil || secret == "" {
		return nil, false
	}
	h := sha256.Sum256([]byte(secret))
	found := -1
	for i := range t.list {
		if subtle.ConstantTimeCompare(h[:], t.list[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, false
	}
	return &t.list[found], true
}

// Hash is the line that stands for token in a token file: sha256: and its
// SHA-256 in hex. Tokens are random (NewToken): a fast hash keeps them as
// safe as the file's readers cannot learn them.
func Hash(token string) string {
	h := sha256.Sum256([]byte(token))
	return HashPrefix + hex.EncodeToString(h[:])
}

// NewToken returns a random token of 256 bits, in hex.
func NewToken() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Bearer returns the bearer token of an Authorization header value ("" if
// it holds none). The scheme is case-insensitive (RFC 9110 11.1).
func Bearer(header string) string {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimLeft(tok, " ")
}

// Transport sends token as a bearer token with every request of next (nil:
// http.DefaultTransport): a client of the API with an API token.
func Transport(token string, next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return bearer{token, next}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
