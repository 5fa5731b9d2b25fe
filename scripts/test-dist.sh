#!/usr/bin/env bash
# Installs the packages `make dist` built in dist/ on this machine and checks
# them, the .deb (dpkg) and then the .rpm (Debian's rpm, without
# dependencies: rpm's database knows none of Debian's packages):
# - the files are where the units expect them, the configuration files are
#   there, the users exist;
# - the systemd units pass `systemd-analyze verify` (where it exists);
# - the server runs as its own user with the unit's options, answers
#   /healthz, and says nothing is open on loopback; the agent runs as its
#   own user with the unit's capabilities only (setpriv) and sees processes;
# - removing the packages stops nothing that is not there and leaves no
#   file of theirs behind (but the configuration, which a purge removes).
# Needs root. Leaves no process behind.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
	echo "test-dist: needs root (it installs packages)" >&2
	exit 1
fi
./scripts/dist-deps.sh
shopt -s nullglob
debs=(dist/*.deb)
rpms=(dist/*.rpm)
if [ ${#debs[@]} -ne 2 ] || [ ${#rpms[@]} -ne 2 ]; then
	echo "test-dist: want 2 .deb and 2 .rpm in dist/, found: ${debs[*]} ${rpms[*]}" >&2
	exit 1
fi
work=$(mktemp -d)
chmod 0755 "$work" # the packages' users run in it
server_pid=
cleanup() {
	if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "test-dist: $*" >&2; exit 1; }

check_installed() {
	local how=$1
	for f in /usr/bin/taskscope /usr/bin/taskscope-agent /usr/lib/systemd/system/taskscope.service \
		/usr/lib/systemd/system/taskscope-agent.service /etc/taskscope/server.env /etc/taskscope/agent.env; do
		[ -e "$f" ] || fail "$how: $f is not installed"
	done
	/usr/bin/taskscope version | grep -q '^taskscope ' || fail "$how: taskscope version"
	/usr/bin/taskscope-agent version | grep -q '^taskscope-agent ' || fail "$how: taskscope-agent version"
	getent passwd taskscope >/dev/null || fail "$how: no user taskscope"
	getent passwd taskscope-agent >/dev/null || fail "$how: no user taskscope-agent"
	if command -v systemd-analyze >/dev/null 2>&1; then
		# Units of the package, checked as systemd would load them.
		systemd-analyze verify /usr/lib/systemd/system/taskscope.service /usr/lib/systemd/system/taskscope-agent.service \
			>"$work/verify" 2>&1 || { cat "$work/verify" >&2; fail "$how: systemd-analyze verify"; }
		if grep -v 'network-online.target' "$work/verify" | grep -q .; then
			cat "$work/verify" >&2
			fail "$how: systemd-analyze verify warns"
		fi
		echo "test-dist: $how: systemd-analyze verify: ok"
	else
		echo "test-dist: $how: no systemd-analyze here: units not verified"
	fi

	# The server as the unit runs it: its user, its options, a data
	# directory of its own.
	# shellcheck disable=SC1091
	. /etc/taskscope/server.env
	local data="$work/data-$how" url ok=
	install -d -o taskscope -g taskscope -m 0750 "$data"
	# shellcheck disable=SC2086
	setpriv --reuid taskscope --regid taskscope --init-groups --inh-caps=-all --bounding-set=-all --no-new-privs \
		/usr/bin/taskscope server --data-dir "$data" $TASKSCOPE_SERVER_OPTS --listen 127.0.0.1:0 >"$work/server.log" 2>&1 &
	server_pid=$!
	for _ in $(seq 1 150); do
		url=$(sed -n 's/^taskscope server on \(http[^ ]*\) .*/\1/p' "$work/server.log")
		if [ -n "$url" ] && curl -fsS "$url/healthz" 2>/dev/null | grep -q ok; then ok=1; break; fi
		sleep 0.2
	done
	[ -n "$ok" ] || { cat "$work/server.log" >&2; fail "$how: the server did not answer /healthz"; }
	if grep -q WARNING "$work/server.log"; then cat "$work/server.log" >&2; fail "$how: the server on loopback warned"; fi
	[ "$(stat -c %U "$data")" = taskscope ] || fail "$how: data directory not the server's"
	kill "$server_pid"; wait "$server_pid" || true; server_pid=
	echo "test-dist: $how: the server ran as taskscope"

	# The agent as the unit runs it: its user, exactly its capabilities.
	setpriv --reuid taskscope-agent --regid taskscope-agent --init-groups \
		--inh-caps=-all,+sys_ptrace,+dac_read_search,+net_admin --ambient-caps=-all,+sys_ptrace,+dac_read_search,+net_admin \
		--bounding-set=-all,+sys_ptrace,+dac_read_search,+net_admin \
		/usr/bin/taskscope-agent snapshot --json --interval 0 >"$work/snapshot.json" 2>"$work/agent.log" ||
		{ cat "$work/agent.log" >&2; fail "$how: the agent's snapshot as taskscope-agent"; }
	grep -q '"host"' "$work/snapshot.json" || fail "$how: the agent's snapshot: $(head -c 300 "$work/snapshot.json")"
	echo "test-dist: $how: the agent ran as taskscope-agent with its three capabilities"
}

check_removed() {
	local how=$1
	for f in /usr/bin/taskscope /usr/bin/taskscope-agent /usr/lib/systemd/system/taskscope.service /usr/lib/systemd/system/taskscope-agent.service; do
		[ ! -e "$f" ] || fail "$how: $f is still there after removal"
	done
}

echo "test-dist: dpkg -i ${debs[*]}"
dpkg -i "${debs[@]}" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg -i"; }
dpkg -s taskscope taskscope-agent | grep -q '^Status: install ok installed' || fail "dpkg -s"
check_installed deb
dpkg --purge taskscope taskscope-agent >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg --purge"; }
check_removed deb
[ ! -e /etc/taskscope/server.env ] || fail "deb: the purge left /etc/taskscope/server.env"

echo "test-dist: rpm -i ${rpms[*]}"
rpm -i --nodeps "${rpms[@]}" >"$work/rpm.log" 2>&1 || { cat "$work/rpm.log" >&2; fail "rpm -i"; }
rpm -q taskscope taskscope-agent >/dev/null || fail "rpm -q"
check_installed rpm
rpm -e taskscope taskscope-agent >"$work/rpm.log" 2>&1 || { cat "$work/rpm.log" >&2; fail "rpm -e"; }
check_removed rpm
rm -f /etc/taskscope/server.env.rpmsave /etc/taskscope/agent.env.rpmsave
rmdir /etc/taskscope 2>/dev/null || true
echo "test-dist: ok (${debs[*]##*/} ${rpms[*]##*/})"
