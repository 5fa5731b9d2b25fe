# benchsplit.awk turns each line of the Tick and Agent benchmarks into one
# line per implementation (impl=baseline, impl=tracker; impl=baseline and
# one per agent), with the CPU per tick of each as sec/op (and, where the
# line has them, its context switches per tick as switches/op; for
# BenchmarkAgent/start, each agent's start-cpu-ms and rss-MB), so that
# benchstat compares them:
#
#	awk -f internal/tracker/testdata/benchsplit.awk bench.txt > split.txt
#	benchstat -col /impl split.txt
/^Benchmark.*cpu-ns\/tick/ {
  name = $1; sub(/-[0-9]+$/, "", name)
  delete cpu; delete sw; n = 0
  for (i = 3; i < NF; i++) {
    unit = $(i+1)
    if (unit ~ /-cpu-ns\/tick$/) {
      impl = unit; sub(/-cpu-ns\/tick$/, "", impl)
      cpu[impl] = $i; order[++n] = impl
    }
    if (unit ~ /-switches\/tick$/) {
      impl = unit; sub(/-switches\/tick$/, "", impl)
      sw[impl] = $i
    }
  }
  for (k = 1; k <= n; k++) {
    impl = order[k]
    line = sprintf("%s/impl=%s 1 %s ns/op", name, impl, cpu[impl])
    if (impl in sw) line = line sprintf(" %s switches/op", sw[impl])
    print line
  }
  next
}
# BenchmarkAgent/start: each agent's start CPU (ms) and peak RSS (MB).
/^Benchmark.*-start-cpu-ms/ {
  name = $1; sub(/-[0-9]+$/, "", name)
  delete cpu; delete rss; n = 0
  for (i = 3; i < NF; i++) {
    unit = $(i+1)
    if (unit ~ /-start-cpu-ms$/) {
      impl = unit; sub(/-start-cpu-ms$/, "", impl)
      cpu[impl] = $i; order[++n] = impl
    }
    if (unit ~ /-rss-MB$/) {
      impl = unit; sub(/-rss-MB$/, "", impl)
      rss[impl] = $i
    }
  }
  for (k = 1; k <= n; k++) {
    impl = order[k]
    line = sprintf("%s/impl=%s 1 %s start-cpu-ms", name, impl, cpu[impl])
    if (impl in rss) line = line sprintf(" %s rss-MB", rss[impl])
    print line
  }
  next
}
/^Benchmark/ { next }
{ print }
