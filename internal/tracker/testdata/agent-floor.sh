#!/usr/bin/env bash
# agent-floor.sh: issue 25's figures of the agent, in one go, for a quiet
# machine (docs/operations.md, "Against the floor (issue 25)" and "Accuracy
# under churn"). Run it from the repository's root, as root:
#
#	internal/tracker/testdata/agent-floor.sh [BASE]
#
# It builds the floor (FLOOR_SRC, default ../shared/bench/floor: outside the
# repository, built into OUT), the agent of this tree ("new") and, given a
# commit, the agent of BASE ("base"), then:
#
#  1. CPU a tick of each agent against the floor (BenchmarkAgent), in turn
#     within each round, ROUNDS rounds (6): 40 task processes among 150
#     asleep, the same at work, and under 500 new processes a second, at
#     250 ms; and each agent's start (CPU and peak RSS over 300 processes);
#  2. the instructions each agent runs in user space a tick (callgrind) and
#     its allocations, 2 rounds of each scenario, in a pid namespace of the
#     benchmark's own (no other process's work counts; taskstats is off
#     there, so its exit records and thread groups are not exercised);
#  3. TestLiveChurn/records ACCURACY times (10): every task attempt's CPU
#     against wait4 under a churn of Streaming children.
#
# Everything goes to OUT (default /tmp/taskscope-agent-floor-<time>), and
# the summaries to its summary.txt. WINDOW (ticks counted, 40) and WARMUP
# (5s) set each run's window: TASKSCOPE_AGENT_WINDOW=180
# TASKSCOPE_AGENT_WARMUP=15s measure as the floor's README does (45 s
# counted: about four times as long). SKIP=cpu,callgrind,accuracy skips
# parts.
set -euo pipefail

root=$(git rev-parse --show-toplevel)
cd "$root"
base=${1:-}
out=${OUT:-/tmp/taskscope-agent-floor-$(date +%Y%m%d-%H%M%S)}
floor_src=${FLOOR_SRC:-$root/../shared/bench/floor}
rounds=${ROUNDS:-6}
accuracy=${ACCURACY:-10}
window=${WINDOW:-40}
warmup=${WARMUP:-5s}
skip=${SKIP:-}
mkdir -p "$out"
echo "agent-floor: writing to $out"

benchstat=$(command -v benchstat || true)
if [ -z "$benchstat" ]; then
	GOFLAGS=-mod=mod go install golang.org/x/perf/cmd/benchstat@latest
	benchstat=$(go env GOPATH)/bin/benchstat
fi

[ -d "$floor_src" ] || { echo "agent-floor: no floor at $floor_src (FLOOR_SRC)" >&2; exit 1; }
(cd "$floor_src" && go build -o "$out/floor" .)
CGO_ENABLED=0 go build -trimpath -o "$out/agent-new" ./cmd/taskscope-agent
agents="new=$out/agent-new"
if [ -n "$base" ]; then
	rm -rf "$out/base-src" && mkdir -p "$out/base-src"
	git archive "$base" | tar -x -C "$out/base-src"
	(cd "$out/base-src" && CGO_ENABLED=0 go build -trimpath -o "$out/agent-base" ./cmd/taskscope-agent)
	agents="base=$out/agent-base,$agents"
fi
go test -c -o "$out/tracker.test" ./internal/tracker
git log -1 --format='new: %H %s' >"$out/summary.txt"
[ -z "$base" ] || echo "base: $(git rev-parse "$base")" >>"$out/summary.txt"
{ uptime; nproc; } >>"$out/summary.txt"

scenarios='40of150-250ms|working40of150-250ms|churn500-40of150-250ms'
cd internal/tracker
export TASKSCOPE_FLOOR="$out/floor" TASKSCOPE_AGENTS="$agents"
export TASKSCOPE_AGENT_WINDOW="${TASKSCOPE_AGENT_WINDOW:-$window}" TASKSCOPE_AGENT_WARMUP="${TASKSCOPE_AGENT_WARMUP:-$warmup}"

if [[ $skip != *cpu* ]]; then
	echo "agent-floor: 1. CPU a tick against the floor, $rounds rounds"
	vmstat 10 >"$out/vmstat.txt" &
	vm=$!
	"$out/tracker.test" -test.run '^$' -test.bench "Agent/^($scenarios|start)\$" -test.benchtime 1x \
		-test.count "$rounds" -test.v 2>&1 | tee "$out/floor.txt" | grep -E '^(Benchmark|.*_test\.go:[0-9]+: round|--- FAIL)' || true
	kill "$vm"
	{
		echo "== each agent over the floor, median of the rounds' ratios"
		"$benchstat" -filter '.unit:/ratio$/' "$out/floor.txt"
		echo "== CPU a tick (the floor and the agents), start and RSS"
		awk -f testdata/benchsplit.awk "$out/floor.txt" >"$out/split.txt"
		"$benchstat" -col /impl "$out/split.txt"
	} >>"$out/summary.txt" 2>&1
fi

if [[ $skip != *callgrind* ]]; then
	echo "agent-floor: 2. instructions a tick (callgrind), in a pid namespace"
	mkdir -p "$out/callgrind"
	TASKSCOPE_AGENT_CALLGRIND="$out/callgrind" unshare --pid --fork --mount-proc "$out/tracker.test" -test.run '^$' \
		-test.bench "Agent/^($scenarios)\$" -test.benchtime 1x -test.count 2 -test.v 2>&1 | tee "$out/callgrind.txt" |
		grep -E '_test\.go:[0-9]+: round|--- FAIL' || true
	{
		echo "== instructions, allocations a tick (callgrind, pid namespace)"
		grep -E '_test\.go:[0-9]+: round' "$out/callgrind.txt" | grep -v ' floor:' | sed 's/^.*_test\.go:[0-9]*: //' || true
	} >>"$out/summary.txt"
fi

if [[ $skip != *accuracy* ]]; then
	echo "agent-floor: 3. TestLiveChurn/records, $accuracy runs"
	for i in $(seq "$accuracy"); do
		uptime >"$out/accuracy-$i.txt"
		"$out/tracker.test" -test.count=1 -test.run '^TestLiveChurn$/records' -test.v >>"$out/accuracy-$i.txt" 2>&1 || true
		echo "run $i: $(grep -cE '^\s*--- FAIL: TestLiveChurn/records' "$out/accuracy-$i.txt" | sed 's/^0$/pass/; s/^1$/FAIL/')," \
			"$(head -1 "$out/accuracy-$i.txt" | sed 's/.*load/load/')"
	done | tee -a "$out/summary.txt"
	{
		echo "== every attempt's CPU against wait4"
		grep -hE 'wait4 +[0-9]+ ms, tracker' "$out"/accuracy-*.txt | sed 's/.*live_test.go:[0-9]*: //'
	} >>"$out/summary.txt"
fi
echo "agent-floor: done; $out/summary.txt:"
cat "$out/summary.txt"
