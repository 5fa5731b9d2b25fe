package store

import (
	"encoding/json"
	"fmt"
	"io"
	"testing"
)

// bigJob is a job of n attempts with every field set, as the API answers
// GET /api/v1/jobs/{id}.
func bigJob(n int) *JobDetail {
	d := &JobDetail{Job: Job{JobID: "job_1700000000000_0001", Framework: "mapreduce", Name: "big-etl", User: "etl",
		Queue: "etl", State: StateFinished, Start: 1700000000000, End: 1700003600000, LastSeen: 1700003600000,
		Attempts: n, ByType: map[string]int{"map": n}, Hosts: 100}}
	for i := 0; i < n; i++ {
		d.AttemptList = append(d.AttemptList, Attempt{AttemptID: fmt.Sprintf("attempt_1700000000000_0001_m_%06d_0", i),
			JobID: d.JobID, Host: fmt.Sprintf("node%03d.example.com", i%100),
			ContainerID: fmt.Sprintf("container_e01_1700000000000_0001_01_%06d", i+2), AppID: "application_1700000000000_0001",
			Type: "map", Framework: "mapreduce", State: StateFinished, Start: Time(1700000000000 + int64(i)*1000),
			End: Time(1700000060000 + int64(i)*1000), LastSeen: Time(1700000060000 + int64(i)*1000), DurationMs: 60000,
			CPUMs: 45210, PeakRSS: 612345678, PeakPSS: 598765432, PeakVMS: 4123456789, PeakHeap: 412345678, Processes: 2,
			ReadBytes: 134217728, WriteBytes: 67108864, GCTimeMs: 1234, SchedWaitMs: 567, MemoryMB: 2048,
			XmxBytes: 1717986918, JavaOpts: "-Xmx1638m", JobName: "big-etl", User: "etl", Queue: "etl"})
	}
	return d
}

// BenchmarkMarshalJobDetail encodes a job of 10,000 attempts as the API
// does (json.Encoder, HTML escaped).
//
//	go test -run '^$' -bench MarshalJobDetail ./internal/store/
func BenchmarkMarshalJobDetail(b *testing.B) {
	d := bigJob(10000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		enc := json.NewEncoder(io.Discard)
		enc.SetEscapeHTML(true)
		if err := enc.Encode(d); err != nil {
			b.Fatal(err)
		}
	}
}
