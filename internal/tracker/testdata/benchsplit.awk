# benchsplit.awk turns each line of the Tick benchmarks into two, impl=baseline
# and impl=tracker, with the CPU per tick of each as sec/op, so that benchstat
# compares them:
#
#	awk -f internal/tracker/testdata/benchsplit.awk bench.txt > split.txt
#	benchstat -col /impl split.txt
/^Benchmark.*cpu-ns\/tick/ {
  name = $1; sub(/-[0-9]+$/, "", name)
  for (i = 3; i < NF; i++) {
    if ($(i+1) == "tracker-cpu-ns/tick") tr = $i
    if ($(i+1) == "baseline-cpu-ns/tick") bl = $i
  }
  printf "%s/impl=baseline 1 %s ns/op\n", name, bl
  printf "%s/impl=tracker 1 %s ns/op\n", name, tr
  next
}
/^Benchmark/ { next }
{ print }
