package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

// TestHandler: files are served, the app's routes get index.html, and no
// directory is listed (issue 16: GET /assets/ listed the UI's files).
func TestHandler(t *testing.T) {
	h := handler(fstest.MapFS{
		"index.html":           {Data: []byte("<!doctype html><title>taskscope</title>")},
		"assets/index-1a2b.js": {Data: []byte("console.log(1)")},
		"assets/sub/x.css":     {Data: []byte("body{}")},
	}, true)
	for _, c := range []struct {
		path string
		code int
		body string
	}{
		{"/", 200, "<title>taskscope</title>"},
		{"/jobs/job_1_0001", 200, "<title>taskscope</title>"},
		{"/assets/index-1a2b.js", 200, "console.log(1)"},
		{"/assets/", 404, ""},
		{"/assets", 404, ""},
		{"/assets/sub/", 404, ""},
		{"/assets/sub", 404, ""},
		{"/assets/missing.js", 404, ""},
		{"/api/v1/nothing", 404, ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != c.code || !strings.Contains(string(body), c.body) || strings.Contains(string(body), "index-1a2b.js") && c.path != "/assets/index-1a2b.js" {
			t.Errorf("GET %s: %d %q, want %d with %q", c.path, rec.Code, body, c.code, c.body)
		}
		if rec.Header().Get("Content-Security-Policy") == "" {
			t.Errorf("GET %s: no CSP", c.path)
		}
	}
}
