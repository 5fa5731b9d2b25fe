//go:build !linux

package analysis

import "time"

// threadCPU is not known here.
func threadCPU() (time.Duration, bool) { return 0, false }
