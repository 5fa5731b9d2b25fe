#!/usr/bin/env bash
# Installs what taskscope's benchmarks need beyond the tests': Debian's
# VictoriaMetrics, the baseline of the ingest benchmark
# (BenchmarkHTTPIngestSustained/victoria-metrics). Idempotent; needs root
# for apt-get.
set -euo pipefail
if ! command -v victoria-metrics >/dev/null 2>&1; then
	if [ "$(id -u)" != 0 ]; then
		echo "bench-deps: need victoria-metrics (run as root, or install it)" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# Its package starts no service here (no systemd); the benchmark
	# starts its own on loopback.
	apt-get install -y -qq --no-install-recommends victoria-metrics >/dev/null
fi
echo "bench-deps: ok ($(command -v victoria-metrics))"
