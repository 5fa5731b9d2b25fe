package org.apache.hadoop.mapred;

import java.io.File;
import taskscope.sim.Conf;
import taskscope.sim.Log;
import taskscope.sim.Task;

/**
 * Simulator stand-in for Hadoop's YarnChild: a MapReduce task JVM on YARN.
 * argv: amHost amPort attemptId jvmId. Reads job.xml from its working
 * directory, writes the task's own job.xml there (as YarnChild does), runs the
 * attempt and exits.
 */
public final class YarnChild {
    private YarnChild() {}

    public static void main(String[] args) throws Exception {
        long start = System.currentTimeMillis();
        String attempt = args[2];
        Log log = Log.container(YarnChild.class.getName());
        log.info("Executing with tokens; attempt " + attempt + " jvm " + args[3] + " umbilical " + args[0] + ":" + args[1]);
        File jobFile = new File("job.xml");
        Conf job = Conf.readXml(jobFile);
        Task.configure(job, attempt);
        String local = System.getenv("LOCAL_DIRS");
        if (local != null) {
            job.set("mapreduce.cluster.local.dir", local);
        }
        job.writeXml(jobFile);
        int rc = Task.work(job, attempt, start, log);
        log.info("Task '" + attempt + "' done.");
        System.exit(rc);
    }
}
