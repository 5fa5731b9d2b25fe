#!/bin/sh
# taskscope server: its own system user, then systemd learns of the unit.
set -e
if ! getent group taskscope >/dev/null; then
	groupadd --system taskscope
fi
if ! getent passwd taskscope >/dev/null; then
	useradd --system --gid taskscope --home-dir /var/lib/taskscope --no-create-home \
		--shell /usr/sbin/nologin --comment "taskscope server" taskscope
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
fi
echo "taskscope: it listens on 127.0.0.1:8080; see /etc/taskscope/server.env and docs/security.md, then: systemctl enable --now taskscope"
