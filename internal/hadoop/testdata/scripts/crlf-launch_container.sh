#!/bin/bash
export CONTAINER_ID="container_e07_1700000000000_0042_01_000005"
exec /bin/bash -c "$JAVA_HOME/bin/java -Xmx512m org.apache.hadoop.mapred.YarnChild 10.1.2.3 39417 attempt_1700000000000_0042_r_000000_1 5 1>/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/stdout 2>/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/stderr "
