package storetest

import (
	"context"
	"testing"

	"github.com/taskscope/taskscope/internal/store"
)

// Plain is st with none of its optional capabilities (store.go: a
// BatchPreparer, SeqReader, SeriesBatcher, ...): only store.Store, and
// Appenders that are only store.Appender. Whoever uses a capability
// through package store's helpers (store.ReadSeriesMany, ...) gets their
// fallbacks from it.
func Plain(st store.Store) store.Store { return plain{st} }

type plain struct{ store.Store }

func (p plain) Begin(ctx context.Context) (store.Appender, error) {
	app, err := p.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return plainAppender{app}, nil
}

type plainAppender struct{ store.Appender }

// Unplain is the store Plain hid the capabilities of (st itself if it is
// not one).
func Unplain(st store.Store) store.Store {
	if p, ok := st.(plain); ok {
		return p.Store
	}
	return st
}

// RunPlain runs the conformance suite on f's stores through Plain: every
// capability hidden, so that the helpers' fallbacks pass the suite too.
func RunPlain(t *testing.T, f Factory) {
	pf := Factory{Open: func(t *testing.T, c store.Clock) store.Store { return Plain(f.Open(t, c)) }}
	if f.Reopen != nil {
		pf.Reopen = func(t *testing.T, s store.Store, c store.Clock) store.Store {
			return Plain(f.Reopen(t, Unplain(s), c))
		}
	}
	Run(t, pf)
}
