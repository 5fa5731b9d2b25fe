package taskstats

import (
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkDrain: the CPU (getrusage of this process) that Drain takes per
// exit record, for the records of 200 processes queued at once (a tick's
// worth under a churn of 500 new processes a second at 250 ms, and the
// rest of the machine's exits). Other processes exiting on the machine
// add their records to the count.
//
//	go test -run '^$' -bench Drain -count 6 ./internal/taskstats/
func BenchmarkDrain(b *testing.B) {
	l, err := Listen()
	if err != nil {
		b.Skipf("taskstats: %v", err)
	}
	defer l.Close()
	var cpu int64
	records := 0
	for i := 0; i < b.N; i++ {
		for j := 0; j < 200; j++ {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
		c0 := cpuNow()
		if err := l.Drain(func(*Record) { records++ }); err != nil {
			b.Fatal(err)
		}
		cpu += cpuNow() - c0
	}
	b.ReportMetric(float64(cpu)/float64(records), "cpu-ns/record")
	b.ReportMetric(float64(records)/float64(b.N), "records/op")
}

func cpuNow() int64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkListen: the CPU that registering for exit records takes (the
// agent's start), this process's and its children's (a probe by a child
// process counted the child's fork and exec).
//
//	go test -run '^$' -bench Listen -count 6 ./internal/taskstats/
func BenchmarkListen(b *testing.B) {
	var cpu int64
	for i := 0; i < b.N; i++ {
		c0 := cpuNow() + childrenCPU()
		l, err := Listen()
		if err != nil {
			b.Skipf("taskstats: %v", err)
		}
		cpu += cpuNow() + childrenCPU() - c0
		l.Close()
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

func childrenCPU() int64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_CHILDREN, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
