package analysis

import (
	"syscall"
	"time"
)

// threadCPU is the CPU the calling thread has used, and whether it is
// known (a worker locked to its thread measures its analyses by it).
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
