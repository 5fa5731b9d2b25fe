package store

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestDiskFullError(t *testing.T) {
	base := fmt.Errorf("cannot store batches: %w", fs.ErrPermission)
	e := DiskFullError(base)
	if !errors.Is(e, ErrDiskFull) || !errors.Is(e, fs.ErrPermission) || e.Error() != base.Error() {
		t.Errorf("DiskFullError(%v) = %v: Is(ErrDiskFull) %v, Is(its cause) %v", base, e, errors.Is(e, ErrDiskFull),
			errors.Is(e, fs.ErrPermission))
	}
	if DiskFullError(e) != e {
		t.Error("marked twice")
	}
	if DiskFullError(nil) != nil {
		t.Error("DiskFullError(nil) is not nil")
	}
	if errors.Is(base, ErrDiskFull) {
		t.Error("an unmarked error is ErrDiskFull")
	}
	if w := fmt.Errorf("commit: %w", e); !errors.Is(w, ErrDiskFull) {
		t.Error("wrapped again, the mark is lost")
	}
}
