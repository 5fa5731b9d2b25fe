#!/bin/sh
# Stops and disables taskscope-agent.service when the package is removed (not on an
# upgrade: dpkg says "upgrade", rpm a count of 1).
set -e
case "$1" in
upgrade|1) exit 0 ;;
esac
if [ -d /run/systemd/system ]; then
	systemctl disable --now taskscope-agent.service >/dev/null 2>&1 || true
fi
