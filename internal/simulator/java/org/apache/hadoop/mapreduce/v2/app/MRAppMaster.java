package org.apache.hadoop.mapreduce.v2.app;

import java.io.File;
import taskscope.sim.AppMaster;
import taskscope.sim.Conf;
import taskscope.sim.Log;

/** Simulator stand-in for the MapReduce ApplicationMaster. Reads job.xml from its working directory. */
public final class MRAppMaster {
    private MRAppMaster() {}

    public static void main(String[] args) throws Exception {
        Log log = Log.container(MRAppMaster.class.getName());
        log.info("Created MRAppMaster for application " + System.getenv("CONTAINER_ID"));
        AppMaster.run(Conf.readXml(new File("job.xml")), "am", log);
    }
}
