#!/bin/sh
# taskscope-agent: its own system user, then systemd learns of the unit.
set -e
if ! getent group taskscope-agent >/dev/null; then
	groupadd --system taskscope-agent
fi
if ! getent passwd taskscope-agent >/dev/null; then
	useradd --system --gid taskscope-agent --home-dir /var/lib/taskscope-agent --no-create-home \
		--shell /usr/sbin/nologin --comment "taskscope agent" taskscope-agent
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
fi
echo "taskscope-agent: set --server and --token-file in /etc/taskscope/agent.env, then: systemctl enable --now taskscope-agent"
