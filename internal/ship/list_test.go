package ship

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestCatchUpInLists: batches that waited while the server answered 503
// go as lists, at most maxList a request, in order, each once; then a
// batch queued behind none goes alone again.
func TestCatchUpInLists(t *testing.T) {
	srv := newIngestServer(t)
	srv.setStatus(func(int, string, uint64) (int, http.Header) { return http.StatusServiceUnavailable, nil })
	hs := httptest.NewServer(srv)
	defer hs.Close()
	cfg := Config{URLs: []string{hs.URL}, SpoolDir: t.TempDir()}
	s := start(t, cfg)
	const n = maxList + 36
	for range n {
		s.Enqueue(batch(2))
	}
	srv.setStatus(nil)
	s.flush(t, 20*time.Second)
	wantOrder(t, srv.received(), seqs(s.AgentID(), 1, n)...)
	srv.mu.Lock()
	lists := srv.lists
	srv.mu.Unlock()
	if lists < 2 || lists > 4 {
		t.Errorf("%d lists for %d batches, want 2 to 4 (at most %d a list)", lists, n, maxList)
	}
	if st := s.Stats(); st.Sent != n || st.Duplicates != 0 || st.Rejected != 0 || st.QueuedBatches != 0 {
		t.Errorf("stats %+v", st)
	}
	if files := spoolFiles(t, cfg.SpoolDir); len(files) != 0 {
		t.Errorf("%d spool files left", len(files))
	}
	s.Enqueue(batch(2))
	s.flush(t, 10*time.Second)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.lists != lists {
		t.Errorf("a batch queued behind none went in a list")
	}
}

// TestListsRefused: a server that answers a list 415 (it takes none) gets
// batches one by one from then on; a list refused for good (422) has its
// batches sent one by one, so that only the bad one is kept aside.
func TestListsRefused(t *testing.T) {
	t.Run("415", func(t *testing.T) {
		srv := newIngestServer(t)
		srv.noLists = true
		srv.setStatus(func(int, string, uint64) (int, http.Header) { return http.StatusServiceUnavailable, nil })
		hs := httptest.NewServer(srv)
		defer hs.Close()
		s := start(t, Config{URLs: []string{hs.URL}})
		for range 5 {
			s.Enqueue(batch(1))
		}
		srv.setStatus(nil)
		s.flush(t, 10*time.Second)
		wantOrder(t, srv.received(), seqs(s.AgentID(), 1, 5)...)
		if st := s.Stats(); st.Sent != 5 || st.Rejected != 0 {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("422", func(t *testing.T) {
		srv := newIngestServer(t)
		srv.setStatus(func(int, string, uint64) (int, http.Header) { return http.StatusServiceUnavailable, nil })
		hs := httptest.NewServer(srv)
		defer hs.Close()
		s := start(t, Config{URLs: []string{hs.URL}, SpoolDir: t.TempDir()})
		for range 5 {
			s.Enqueue(batch(1))
		}
		srv.setStatus(func(_ int, _ string, seq uint64) (int, http.Header) {
			if seq == 3 {
				return http.StatusUnprocessableEntity, nil
			}
			return http.StatusOK, nil
		})
		s.flush(t, 10*time.Second)
		wantOrder(t, srv.received(), append(seqs(s.AgentID(), 1, 2), seqs(s.AgentID(), 4, 5)...)...)
		if st := s.Stats(); st.Sent != 4 || st.Rejected != 1 {
			t.Errorf("stats %+v: want 4 sent, 1 rejected", st)
		}
	})
}
