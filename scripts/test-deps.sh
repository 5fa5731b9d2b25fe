#!/usr/bin/env bash
# Installs what taskscope's tests need beyond Go, node and java: Debian's
# Chromium (headless browser tests). Idempotent; needs root for apt-get.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "test-deps: need ${need[*]} (run as root, or install them)" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "test-deps: ok ($(chromium --version 2>/dev/null || echo 'no chromium'))"
