package org.apache.spark.deploy.yarn;

import java.io.File;
import taskscope.sim.AppMaster;
import taskscope.sim.Conf;
import taskscope.sim.Log;

/** Simulator stand-in for Spark's client-mode ApplicationMaster. Reads __spark_conf__/__spark_conf__.properties. */
public final class ExecutorLauncher {
    private ExecutorLauncher() {}

    public static void main(String[] args) throws Exception {
        Log log = Log.stderr("org.apache.spark.deploy.yarn.ApplicationMaster");
        log.info("ApplicationAttemptId: " + System.getenv("CONTAINER_ID"));
        AppMaster.run(Conf.readProperties(new File("__spark_conf__/__spark_conf__.properties")), "am", log);
    }
}
