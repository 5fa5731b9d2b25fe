package analysis

import (
	"fmt"
	"slices"

	"github.com/taskscope/taskscope/internal/store"
	"github.com/taskscope/taskscope/internal/wire"
)

// streamingBottleneck compares, in Streaming attempts, the CPU of the
// Streaming process (and what it starts) with the CPU of the task JVM over
// the attempt's wall time: one that keeps a core busy while the other
// waits is the bottleneck.
func streamingBottleneck(j *Job) []Finding {
	var out []Finding
	byType := j.byType()
	for _, typ := range sortedTypes(byType) {
		var streaming []store.Attempt
		for _, a := range byType[typ] {
			if a.Streaming {
				streaming = append(streaming, a)
			}
		}
		if len(streaming) == 0 {
			continue
		}
		examined := examinedStreaming(streaming)
		if !anyBusy(examined) {
			continue
		}
		var childBound, jvmBound []string
		var sumChild, sumJVM, sumWall, sumWait float64
		for _, a := range examined {
			if a.DurationMs < 2000 {
				continue
			}
			ps, err := j.processes(a.AttemptID)
			if err != nil {
				continue
			}
			var child, jvm, childWait, jvmWait float64
			for _, p := range ps {
				switch p.Role {
				case wire.RoleStreaming, wire.RoleStreamingChild:
					// What the script reaped is its children's: count it once, at the script.
					if p.Role == wire.RoleStreaming {
						child += float64(p.CPUMs + p.ChildCPUMs)
					} else if !reapedByScript(ps, p) {
						child += float64(p.CPUMs)
					}
					childWait += float64(max(p.SchedWaitMs, 0))
				case wire.RoleTaskJVM:
					jvm += float64(max(0, p.CPUMs-p.CPUBaseMs))
					jvmWait += float64(max(p.SchedWaitMs, 0))
				}
			}
			wall := float64(a.DurationMs)
			sumChild, sumJVM, sumWall = sumChild+child, sumJVM+jvm, sumWall+wall
			// On a busy node a CPU-bound process also waits for a CPU: a
			// side's wait counts as busy for it. The JVM's is its threads'
			// sum, its collector's and compiler's included, which wait on a
			// busy node whatever the pipeline does: it counts up to what the
			// JVM ran (a CPU-bound thread on a node twice overloaded).
			// A side runs at least half the wall time itself to be the
			// bottleneck: a short attempt's JVM that ran a third of it on
			// a node twice overloaded waited as long as it ran, which made
			// 70% of a healthy job's JVM (TestCraftedJobs/healthy-streaming
			// under the race detector).
			sumWait += float64(max(a.SchedWaitMs, 0))
			switch {
			case (child+childWait)/wall >= 0.7 && child/wall >= 0.5 && jvm/wall <= 0.3 && child > jvm:
				childBound = append(childBound, a.AttemptID)
			case (jvm+min(jvmWait, jvm))/wall >= 0.7 && jvm/wall >= 0.5 && child/wall <= 0.3 && jvm > child:
				jvmBound = append(jvmBound, a.AttemptID)
			}
		}
		if sumWall == 0 {
			continue
		}
		n := len(streaming)
		nums := []Number{{"streaming_cpu_share", sumChild / sumWall * 100, "percent"}, {"jvm_cpu_share", sumJVM / sumWall * 100, "percent"},
			{"cpu_wait_share", sumWait / sumWall * 100, "percent"}, {"attempts", float64(n), "count"}}
		waited := ""
		if sumWait >= 0.1*sumWall {
			waited = fmt.Sprintf(" and waited for a CPU %.0f%% more (a busy node)", sumWait/sumWall*100)
		}
		if len(childBound) > 0 {
			share := float64(len(childBound)) / float64(min(n, maxSeriesAttempts))
			out = append(out, Finding{Severity: grade(share, [4]float64{0.1, 0.3, 0.6, 0.9}), TaskType: typ, AttemptIDs: childBound,
				Message: fmt.Sprintf("In %d of %d Streaming %s attempts the Streaming process used a CPU %.0f%% of the wall time%s while the task JVM waited for it (%.0f%%): the script is the bottleneck.",
					len(childBound), n, typ, sumChild/sumWall*100, waited, sumJVM/sumWall*100),
				Recommendation: "Make the script faster (a compiled mapper, less work per record), or give it less input per task so that more run in parallel.",
				Parameter:      "mapreduce.input.fileinputformat.split.maxsize", Value: fmt.Sprint(64 << 20), Numbers: nums})
		}
		if len(jvmBound) > 0 {
			share := float64(len(jvmBound)) / float64(min(n, maxSeriesAttempts))
			out = append(out, Finding{Severity: grade(share, [4]float64{0.1, 0.3, 0.6, 0.9}), TaskType: typ, AttemptIDs: jvmBound,
				Message: fmt.Sprintf("In %d of %d Streaming %s attempts the task JVM used a CPU %.0f%% of the wall time%s while the Streaming process waited (%.0f%%): the framework's side (reading, sorting, spilling) is the bottleneck.",
					len(jvmBound), n, typ, sumJVM/sumWall*100, waited, sumChild/sumWall*100),
				Recommendation: "Give the sort more memory so that it spills less, and compress the map output.",
				Parameter:      "mapreduce.task.io.sort.mb", Value: "256", Numbers: nums})
		}
	}
	return out
}

// examinedStreaming are the Streaming attempts of a type that
// streamingBottleneck looks at: the longest.
func examinedStreaming(streaming []store.Attempt) []store.Attempt {
	return top(streaming, maxSeriesAttempts, func(a store.Attempt) float64 { return float64(a.DurationMs) })
}

// anyBusy reports whether one of the attempts could be bound on either
// side: that needs the attempt's CPU (both sides') and wait at 70% of its
// wall time. Without one there is no finding, and no process lists to read.
func anyBusy(examined []store.Attempt) bool {
	return slices.ContainsFunc(examined, func(a store.Attempt) bool {
		return a.DurationMs >= 2000 && float64(a.CPUMs+max(a.SchedWaitMs, 0)) >= 0.7*float64(a.DurationMs)
	})
}

// streamingAttempts are the attempts whose process lists
// streamingBottleneck reads.
func streamingAttempts(atts []store.Attempt) []store.Attempt {
	var streaming []store.Attempt
	for _, a := range atts {
		if a.Streaming {
			streaming = append(streaming, a)
		}
	}
	examined := examinedStreaming(streaming)
	if !anyBusy(examined) {
		return nil
	}
	var out []store.Attempt
	for _, a := range examined {
		if a.DurationMs >= 2000 {
			out = append(out, a)
		}
	}
	return out
}

// reapedByScript reports whether p's parent is the attempt's Streaming
// process (whose children's CPU shows in its own children's CPU).
func reapedByScript(ps []store.Process, p store.Process) bool {
	for _, q := range ps {
		if q.PID == p.PPID && (q.Role == wire.RoleStreaming || q.Role == wire.RoleStreamingChild) {
			return true
		}
	}
	return false
}
