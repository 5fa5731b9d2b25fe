#!/bin/bash
/bin/bash "/data/yarn/local/usercache/alice/appcache/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/default_container_executor_session.sh"
rc=$?
echo $rc > "/data/yarn/local/nmPrivate/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/container_e07_1700000000000_0042_01_000005.pid.exitcode.tmp"
/bin/mv -f "/data/yarn/local/nmPrivate/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/container_e07_1700000000000_0042_01_000005.pid.exitcode.tmp" "/data/yarn/local/nmPrivate/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/container_e07_1700000000000_0042_01_000005.pid.exitcode"
exit $rc
