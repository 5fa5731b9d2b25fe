export JVM_PID=`echo $$`
export HADOOP_CLIENT_OPTS="-Dhadoop.tasklog.taskid=attempt_201401011200_0007_m_000012_0 -Dhadoop.tasklog.iscleanup=false -Dhadoop.tasklog.totalLogFileSize=0"
export HADOOP_WORK_DIR="/data/1/mapred/local/taskTracker/bob/jobcache/job_201401011200_0007/attempt_201401011200_0007_m_000012_0/work"
export HADOOP_TOKEN_FILE_LOCATION="/data/1/mapred/local/taskTracker/bob/jobcache/job_201401011200_0007/jobToken"
export LD_LIBRARY_PATH="/data/1/mapred/local/taskTracker/bob/jobcache/job_201401011200_0007/attempt_201401011200_0007_m_000012_0/work:/usr/lib/hadoop/lib/native/Linux-amd64-64"
export HADOOP_ROOT_LOGGER="INFO,TLA"
export USER="bob"
export SHELL="/bin/bash"
export LOGNAME="bob"
export HOME="/homes/bob"
exec setsid 'java' '-Djava.library.path=/usr/lib/hadoop/lib/native/Linux-amd64-64:/data/1/mapred/local/taskTracker/bob/jobcache/job_201401011200_0007/attempt_201401011200_0007_m_000012_0/work' '-Xmx200m' '-Djava.net.preferIPv4Stack=true' '-Djava.io.tmpdir=/data/1/mapred/local/taskTracker/bob/jobcache/job_201401011200_0007/attempt_201401011200_0007_m_000012_0/work/tmp' '-classpath' '/etc/hadoop/conf:/usr/lib/jvm/java-6-sun/lib/tools.jar:/usr/lib/hadoop:/usr/lib/hadoop/hadoop-core-1.2.1.jar:/usr/lib/hadoop/lib/asm-3.2.jar:/usr/lib/hadoop/lib/commons-logging-1.1.1.jar' '-Dlog4j.configuration=task-log4j.properties' '-Dhadoop.log.dir=/var/log/hadoop' '-Dhadoop.root.logger=INFO,TLA' '-Dhadoop.tasklog.taskid=attempt_201401011200_0007_m_000012_0' '-Dhadoop.tasklog.iscleanup=false' '-Dhadoop.tasklog.totalLogFileSize=0' 'org.apache.hadoop.mapred.Child' '127.0.0.1' '50271' 'attempt_201401011200_0007_m_000012_0' '/var/log/hadoop/userlogs/job_201401011200_0007/attempt_201401011200_0007_m_000012_0' '-1398519235' < /dev/null  1>> /var/log/hadoop/userlogs/job_201401011200_0007/attempt_201401011200_0007_m_000012_0/stdout 2>> /var/log/hadoop/userlogs/job_201401011200_0007/attempt_201401011200_0007_m_000012_0/stderr
