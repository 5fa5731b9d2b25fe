#!/usr/bin/env bash
# Installs what checking the packages needs beyond dpkg: Debian's rpm (to
# install the .rpm packages on this Debian machine). Idempotent; needs root.
set -euo pipefail
if ! command -v rpm >/dev/null 2>&1; then
	if [ "$(id -u)" != 0 ]; then
		echo "dist-deps: need rpm (run as root, or install it)" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends rpm >/dev/null
fi
echo "dist-deps: ok ($(rpm --version))"
