#!/bin/bash

set -o pipefail -e
export PRELAUNCH_OUT="/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/prelaunch.out"
exec >"${PRELAUNCH_OUT}"
export PRELAUNCH_ERR="/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/prelaunch.err"
exec 2>"${PRELAUNCH_ERR}"
echo "Setting up env variables"
export JAVA_HOME=${JAVA_HOME:-"/usr/lib/jvm/java-8-openjdk-amd64"}
export HADOOP_COMMON_HOME=${HADOOP_COMMON_HOME:-"/opt/hadoop"}
export HADOOP_YARN_HOME=${HADOOP_YARN_HOME:-"/opt/hadoop"}
export CONTAINER_ID="container_e07_1700000000000_0042_01_000005"
export NM_PORT="45454"
export NM_HOST="worker7.example.com"
export NM_HTTP_PORT="8042"
export LOCAL_DIRS="/data/yarn/local/usercache/alice/appcache/application_1700000000000_0042"
export LOG_DIRS="/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005"
export USER="alice"
export LOGNAME="alice"
export HOME="/home/"
export PWD="/data/yarn/local/usercache/alice/appcache/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005"
export JVM_PID="$$"
export HADOOP_ROOT_LOGGER="INFO,console"
export STDOUT_LOGFILE_ENV="/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/stdout"
export SHELL="/bin/bash"
export HADOOP_CLIENT_OPTS=""
echo "Setting up job resources"
ln -sf -- "/data/yarn/local/usercache/alice/appcache/application_1700000000000_0042/filecache/10/job.jar" "job.jar"
ln -sf -- "/data/yarn/local/usercache/alice/appcache/application_1700000000000_0042/filecache/11/job.xml" "job.xml"
echo "Copying debugging information"
# Creating copy of launch script
cp "launch_container.sh" "/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/launch_container.sh"
chmod 640 "/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/launch_container.sh"
# Determining directory contents
echo "ls -l:" 1>"/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/directory.info"
ls -l 1>>"/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/directory.info"
echo "Launching container"
exec /bin/bash -c "$JAVA_HOME/bin/java -Djava.net.preferIPv4Stack=true -Dhadoop.metrics.log.level=WARN  -Xmx820m -Djava.io.tmpdir=$PWD/tmp -Dlog4j.configuration=container-log4j.properties -Dyarn.app.container.log.dir=/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005 -Dyarn.app.container.log.filesize=0 -Dhadoop.root.logger=INFO,CLA -Dhadoop.root.logfile=syslog org.apache.hadoop.mapred.YarnChild 10.1.2.3 39417 attempt_1700000000000_0042_m_000003_0 7696581394437 1>/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/stdout 2>/data/yarn/logs/application_1700000000000_0042/container_e07_1700000000000_0042_01_000005/stderr "
hadoop_shell_errorcode=$?
if [[ "$hadoop_shell_errorcode" -ne 0 ]]
then
  exit $hadoop_shell_errorcode
fi
