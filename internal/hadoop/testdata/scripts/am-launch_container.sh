#!/bin/bash

export CONTAINER_ID="container_e07_1700000000000_0042_01_000001"
export JVM_PID="$$"
echo "Launching container"
exec /bin/bash -c "$JAVA_HOME/bin/java -Djava.io.tmpdir=$PWD/tmp -Dlog4j.configuration=container-log4j.properties -Dyarn.app.container.log.dir=/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000001 -Dyarn.app.container.log.filesize=0 -Dhadoop.root.logger=INFO,CLA -Dhadoop.root.logfile=syslog  -Xmx1024m org.apache.hadoop.mapreduce.v2.app.MRAppMaster 1>/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000001/stdout 2>/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000001/stderr "
