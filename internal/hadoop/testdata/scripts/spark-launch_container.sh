#!/bin/bash

export SPARK_YARN_STAGING_DIR="hdfs://nn:8020/user/carol/.sparkStaging/application_1700000000000_0101"
export CONTAINER_ID="container_1700000000000_0101_01_000003"
export SPARK_USER="carol"
export PYTHONPATH="$PWD/pyspark.zip:$PWD/py4j-0.10.9.7-src.zip"
echo "Launching container"
exec /bin/bash -c "LD_LIBRARY_PATH=\"/opt/hadoop/lib/native:$LD_LIBRARY_PATH\" $JAVA_HOME/bin/java -server -Xmx4096m '-Dspark.network.timeout=120s' -Djava.io.tmpdir=$PWD/tmp '-Dspark.driver.port=37261' '-Dspark.ui.port=0' -Dspark.yarn.app.container.log.dir=/data/yarn/logs/application_1700000000000_0101/container_1700000000000_0101_01_000003 -XX:OnOutOfMemoryError='kill %p' org.apache.spark.executor.YarnCoarseGrainedExecutorBackend --driver-url spark://CoarseGrainedScheduler@10.1.2.9:37261 --executor-id 2 --hostname worker7.example.com --cores 4 --app-id application_1700000000000_0101 --resourceProfileId 0 1>/data/yarn/logs/application_1700000000000_0101/container_1700000000000_0101_01_000003/stdout 2>/data/yarn/logs/application_1700000000000_0101/container_1700000000000_0101_01_000003/stderr"
