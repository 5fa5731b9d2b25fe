#!/usr/bin/env bash
# Installs what taskscope's tests need beyond Go, node and java: Debian's
# Chromium (headless browser tests), clickhouse-server 18.16 and zookeeper
# 3.8 (the ClickHouse store's tests, which start their own servers on
# loopback: the packages start no service here, there is no systemd), and
# prometheus-alertmanager 0.25 (the alert tests start their own on
# loopback), and MIT Kerberos's KDC and kadmin.local (the NodeManager
# client's SPNEGO tests start a KDC of their own realm on loopback, with
# their own krb5.conf and kdc.conf: no system-wide configuration is used).
# Idempotent; needs root for apt-get.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# Debian's server is /usr/sbin/clickhouse-server; ZooKeeper's classes are
# /usr/share/java/zookeeper.jar (its manifest names its dependencies).
[ -x /usr/sbin/clickhouse-server ] || need+=(clickhouse-server)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
[ -x /usr/bin/prometheus-alertmanager ] || need+=(prometheus-alertmanager)
[ -x /usr/sbin/krb5kdc ] || need+=(krb5-kdc)
[ -x /usr/sbin/kadmin.local ] || need+=(krb5-admin-server)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "test-deps: need ${need[*]} (run as root, or install them)" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "test-deps: ok ($(chromium --version 2>/dev/null || echo 'no chromium'); clickhouse-server $(dpkg-query -W -f '${Version}' clickhouse-server); zookeeper $(dpkg-query -W -f '${Version}' zookeeper); prometheus-alertmanager $(dpkg-query -W -f '${Version}' prometheus-alertmanager); krb5-kdc $(dpkg-query -W -f '${Version}' krb5-kdc))"
