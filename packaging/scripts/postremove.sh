#!/bin/sh
# systemd forgets the removed unit. Users, data (/var/lib/taskscope*) and
# configuration stay (a purge removes the configuration files).
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
fi
