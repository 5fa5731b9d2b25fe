package org.apache.tez.dag.app;

import java.io.File;
import taskscope.sim.AppMaster;
import taskscope.sim.Conf;
import taskscope.sim.Log;

/** Simulator stand-in for Tez's DAGAppMaster. Reads tez-conf.pb from its working directory. */
public final class DAGAppMaster {
    private DAGAppMaster() {}

    public static void main(String[] args) throws Exception {
        Log log = Log.container("app.DAGAppMaster");
        log.info("Created DAGAppMaster for application " + System.getenv("CONTAINER_ID"));
        AppMaster.run(Conf.readTezPb(new File("tez-conf.pb")), "am", log);
    }
}
