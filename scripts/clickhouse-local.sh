#!/usr/bin/env bash
# Makes sure a ClickHouse server answers on this machine's port 8123 (what
# `make demo-clickhouse` keeps the demo's data in): if none does, starts
# Debian's clickhouse-server (scripts/test-deps.sh installs it) in the
# background as its user, with the package's configuration
# (/etc/clickhouse-server, data in /var/lib/clickhouse, logs in
# /var/log/clickhouse-server), and waits until it answers. Needs root to
# start it; `kill $(cat /run/clickhouse-server/clickhouse-server.pid)`
# stops it. (The package's init script starts nothing where there is no
# init system, as in containers.)
set -euo pipefail
url=${CLICKHOUSE_PING:-http://127.0.0.1:8123/ping}
answers() { curl -sf -m 2 "$url" >/dev/null 2>&1; }
if answers; then
	echo "clickhouse-local: a server answers on $url"
	exit 0
fi
if [ ! -x /usr/sbin/clickhouse-server ]; then
	echo "clickhouse-local: clickhouse-server is not installed (scripts/test-deps.sh installs it)" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "clickhouse-local: no server on $url, and only root can start Debian's (run this as root)" >&2
	exit 1
fi
install -d -o clickhouse -g clickhouse /run/clickhouse-server
runuser -u clickhouse -- /usr/sbin/clickhouse-server --daemon --config-file=/etc/clickhouse-server/config.xml \
	--pid-file=/run/clickhouse-server/clickhouse-server.pid
for _ in $(seq 1 120); do
	if answers; then
		echo "clickhouse-local: clickhouse-server $(dpkg-query -W -f '${Version}' clickhouse-server) answers on $url"
		exit 0
	fi
	sleep 0.5
done
echo "clickhouse-local: clickhouse-server did not answer on $url within 60 s; its log: /var/log/clickhouse-server/" >&2
exit 1
