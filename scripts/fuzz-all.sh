#!/usr/bin/env bash
# Runs every native fuzzer of the module for the given time each.
set -euo pipefail
t="${1:-10s}"
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
		echo "== $pkg $f"
		go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" -fuzzminimizetime 2s "$pkg"
	done
done
