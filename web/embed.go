// Package web serves taskscope's user interface: the single-page app built
// by npm (web/src, Vite) into web/dist and embedded in the binary.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed all:dist
var dist embed.FS

// CSP is the Content-Security-Policy of every page: scripts and styles only
// from the server itself, nothing inline, no frames. Command lines shown in
// the UI come from untrusted processes; this is the second line of defence
// after escaping.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// SecurityHeaders adds the headers every answer of the server carries.
func SecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

// Built reports whether the UI was built into the binary.
func Built() bool {
	_, err := fs.Stat(dist, "dist/index.html")
	return err == nil
}

const notBuilt = `<!doctype html><meta charset="utf-8"><title>taskscope</title>
<h1>taskscope</h1><p>The web UI was not built into this binary. Run <code>make</code> (it runs
<code>npm ci &amp;&amp; npm run build</code> in web/) and build again. The REST API is at
<a href="/api/v1/jobs">/api/v1/jobs</a>.</p>`

// Handler serves the UI: files from dist, and index.html for every other
// path (the app routes in the browser).
func Handler() http.Handler {
	sub, _ := fs.Sub(dist, "dist")
	return handler(sub, Built())
}

// handler serves the UI built into sub.
func handler(sub fs.FS, built bool) http.Handler {
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		SecurityHeaders(w.Header())
		if !built {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte(notBuilt))
			return
		}
		p := strings.TrimPrefix(path.Clean(r.URL.Path), "/")
		if p != "" && p != "index.html" {
			// Files only: a directory (assets/) is not listed.
			if fi, err := fs.Stat(sub, p); err == nil && !fi.IsDir() {
				if strings.HasPrefix(p, "assets/") {
					// Vite names assets by content hash.
					w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
				}
				files.ServeHTTP(w, r)
				return
			}
			if p == "assets" || p == "api" || strings.HasPrefix(p, "assets/") || strings.HasPrefix(p, "api/") {
				http.NotFound(w, r)
				return
			}
		}
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, sub, "index.html")
	})
}
