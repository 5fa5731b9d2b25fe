package org.apache.tez.dag.app;

import java.io.File;
import taskscope.sim.AppMaster;
import taskscope.sim.Conf;
import taskscope.sim.Log;

/**
 * Simulator stand-in for Tez's DAGAppMaster. Reads tez-conf.pb from its working directory. As
 * Tez does, it logs each DAG it runs to syslog_dag_<dagId> in its log directory, starting with
 * "Running DAG: <name>".
 */
public final class DAGAppMaster {
    private DAGAppMaster() {}

    public static void main(String[] args) throws Exception {
        Log log = Log.container("app.DAGAppMaster");
        log.info("Created DAGAppMaster for application " + System.getenv("CONTAINER_ID"));
        Conf conf = Conf.readTezPb(new File("tez-conf.pb"));
        String logDir = System.getProperty("yarn.app.container.log.dir");
        String container = System.getenv("CONTAINER_ID");
        if (logDir != null && container != null) {
            // container_[e<epoch>_]<ts>_<app>_<attempt>_<seq> -> dag_<ts>_<app>_1
            String[] p = container.split("_");
            int i = p[1].startsWith("e") ? 2 : 1;
            String dagId = "dag_" + p[i] + "_" + p[i + 1] + "_1";
            Log dag = Log.file(new File(logDir, "syslog_" + dagId), "app.DAGAppMaster", true);
            dag.info("Running DAG: " + conf.get("taskscope.sim.job.name", "dag"));
        }
        AppMaster.run(conf, "am", log);
    }
}
