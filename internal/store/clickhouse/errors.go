package clickhouse

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Exception codes the store acts on (ClickHouse's ErrorCodes).
const (
	CodeUnknownTable     = 60
	CodeUnknownDatabase  = 81
	CodeTableExists      = 57
	CodeTooManyParts     = 252 // inserts faster than merges: wait and send again
	CodeNotEnoughSpace   = 243
	CodeMemoryLimit      = 241
	CodeTimeoutExceeded  = 159
	CodeCannotWriteFD    = 75
	CodeReadonly         = 164
	CodeAllReplicasLost  = 279
	CodeNoZooKeeper      = 225
	CodeUnknownSetting   = 115
	CodeSyntaxError      = 62
	CodeUnknownIdentifer = 47
	CodeSocketTimeout    = 209
	CodeNetworkError     = 210
)

// Exception is an error ClickHouse answered.
type Exception struct {
	Code    int    // its exception code (0: none found in the answer)
	Message string // its text, as the server wrote it
	Status  int    // the HTTP status
}

func (e *Exception) Error() string {
	if e.Code == 0 {
		return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("code %d: %s", e.Code, e.Message)
}

// unreachable reports whether the exception says that a server the one
// asked needed could not be reached (a shard of the cluster whose every
// replica is down: ALL_CONNECTION_TRIES_FAILED, a network error or a
// timeout between the servers).
func (e *Exception) unreachable() bool {
	switch e.Code {
	case CodeAllReplicasLost, CodeNetworkError, CodeSocketTimeout:
		return true
	}
	return false
}

// parseException reads the code and the message of an error answer: the
// X-ClickHouse-Exception-Code header where the server sends it (19.x and
// later), else the text, which is "Code: 47, e.displayText() =
// DB::Exception: ..." in 18.16 and "Code: 47. DB::Exception: ..." later.
func parseException(resp *http.Response, body []byte) *Exception {
	e := ParseException(string(body))
	e.Status = resp.StatusCode
	if h := resp.Header.Get("X-ClickHouse-Exception-Code"); h != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && n > 0 {
			e.Code = n
		}
	}
	return e
}

// ParseException parses the text of an error answer.
func ParseException(text string) *Exception {
	text = strings.TrimSpace(text)
	e := &Exception{Message: text}
	rest, ok := strings.CutPrefix(text, "Code: ")
	if !ok {
		return e
	}
	end := 0
	for end < len(rest) && end < 9 && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	code, _ := strconv.Atoi(rest[:end])
	if code == 0 {
		return e
	}
	e.Code = code
	msg := strings.TrimLeft(rest[end:], ".,: ")
	msg = strings.TrimPrefix(msg, "e.displayText() = ")
	msg = strings.TrimPrefix(msg, "DB::Exception: ")
	if i := strings.LastIndex(msg, ", e.what() = "); i >= 0 {
		msg = msg[:i]
	}
	e.Message = msg
	return e
}
