# perfsplit.awk sorts the samples of `perf record -g` of a taskscope-agent
# (BenchmarkAgent with TASKSCOPE_AGENT_PERF=DIR) into the agent's parts and
# prints each part's share of the CPU and its CPU per tick:
#
#	perf script -i DIR/50of300-250ms-new-3.perf | awk -v ticks=20 -f testdata/perfsplit.awk
#
# A sample of the runtime's own threads and goroutines (sysmon, the
# garbage collector's workers, the sweeper, the scavenger) is theirs;
# another goes to the part of the innermost frame (leaf first) that names
# one: the garbage collector's where an allocation helps it, the batch
# builder's where a tick hands it a sample, the tick's otherwise.
# ticks: the ticks the profile covers (its window), for the CPU per tick.
function root(f) {
  if (f ~ /^runtime\.sysmon/) return "runtime: sysmon"
  if (f ~ /^runtime\.(gcBgMarkWorker|bgsweep|bgscavenge|forcegchelper)/) return "runtime: GC"
  return ""
}
function part(f) {
  if (f ~ /^runtime\.(gcBgMarkWorker|gcAssistAlloc|gcDrain|bgsweep|bgscavenge|gcStart|markroot|scanobject|sweepone|gcMarkTermination|forEachP|stopTheWorld)/) return "runtime: GC"
  if (f ~ /^runtime\.sysmon/) return "runtime: sysmon"
  if (f ~ /klauspost\/compress/) return "compression (zstd)"
  if (f ~ /internal\/wire\./) return "batch: encoding"
  if (f ~ /internal\/agent\.\(\*builder\)/ || f ~ /internal\/agent\.\(\*seriesBuf\)/ || f ~ /internal\/agent\.\(\*loop\)\.cut/) return "batch: building"
  if (f ~ /internal\/ship\.\(\*spool\)/ || f ~ /^syscall\.Fsync/ || f ~ /internal\/ship\.readSpoolFile/) return "spool (write, fsync, read back)"
  if (f ~ /internal\/ship\./ || f ~ /^net\/http\./ || f ~ /^net\./ || f ~ /^internal\/poll\./ || f ~ /^crypto\//) return "send (HTTP)"
  if (f ~ /internal\/taskstats\.\(\*Listener\)/) return "exit records (taskstats)"
  if (f ~ /internal\/taskstats\.\(\*Querier\)/) return "tick: thread groups (taskstats)"
  if (f ~ /internal\/tracker\..*[Ll]ost|internal\/tracker\..*[Oo]rphan|internal\/tracker\..*NodeManager|internal\/hadoop\.NM/) return "tick: lost processes, NodeManager"
  if (f ~ /internal\/procfs\.\(\*Lister\)/) return "tick: listing /proc"
  if (f ~ /internal\/tracker\.\(\*Tracker\)\.classify|internal\/tracker\.\(\*Tracker\)\.(newProc|attribute)/) return "tick: classifying new processes"
  if (f ~ /internal\/tracker\.|internal\/collect\.|internal\/procfs\./) return "tick: sampling"
  if (f ~ /prometheus/) return "metrics"
  if (f ~ /^runtime\.(mallocgc|newobject|makeslice|growslice)/) return ""
  if (f ~ /^runtime\.(schedule|findRunnable|park_m|goexit|mcall|netpoll|notesleep|stopm|startm|wakep|runqsteal|checkTimers|runtimer|timerproc|usleep|futex|nanotime|exitsyscall|entersyscall|gopark|goready|ready)/) return "runtime: scheduler, timers, netpoll"
  return ""
}
/^[^ \t]/ { flush(); inSample = 1; n = 0; split($0, h, ":"); period = $(NF-1) + 0; if (period == 0) period = 1; next }
/^[ \t]+[0-9a-f]+ / { if (inSample) { n++; frame[n] = $2 }; next }
/^$/ { flush(); next }
function flush(   i, p, f) {
  if (!inSample) return
  inSample = 0
  p = ""
  for (i = 1; i <= n && p == ""; i++) {
    f = frame[i]; sub(/\+0x[0-9a-f]+$/, "", f)
    p = root(f)
  }
  for (i = 1; i <= n && p == ""; i++) {
    f = frame[i]; sub(/\+0x[0-9a-f]+$/, "", f)
    p = part(f)
  }
  if (p == "") p = (n > 0 && frame[1] ~ /^runtime\./) ? "runtime: other" : "other"
  sum[p] += period; total += period
  n = 0
}
END {
  flush()
  if (total == 0) { print "no samples"; exit 1 }
  for (p in sum) printf "%6.1f%%  %8.0f us/tick  %s\n", 100 * sum[p] / total, (ticks > 0 ? sum[p] / 1000 / ticks : 0), p | "sort -rn"
  close("sort -rn")
  printf "%6.1f%%  %8.0f us/tick  total (%d samples' periods)\n", 100, (ticks > 0 ? total / 1000 / ticks : 0), total
}
