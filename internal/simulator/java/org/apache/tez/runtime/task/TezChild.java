package org.apache.tez.runtime.task;

import java.io.File;
import taskscope.sim.Conf;
import taskscope.sim.Log;
import taskscope.sim.Params;
import taskscope.sim.Work;

/**
 * Simulator stand-in for Tez's TezChild. argv: amHost amPort containerId
 * applicationId appAttemptNumber. Runs the attempts listed for its container
 * in tez-conf.pb one after the other in the same JVM, logging each to
 * syslog_<attemptId> in the container log directory, as Tez does.
 */
public final class TezChild {
    private TezChild() {}

    public static void main(String[] args) throws Exception {
        long start = System.currentTimeMillis();
        String containerId = args[2];
        String logDir = System.getProperty("yarn.app.container.log.dir", ".");
        Log log = Log.file(new File(logDir, "syslog"), "TezChild", true);
        log.info("TezChild starting for " + containerId + " of " + args[3] + " attempt " + args[4] + ", umbilical " + args[0] + ":" + args[1]);
        Conf conf = Conf.readTezPb(new File("tez-conf.pb"));
        String list = conf.get(Params.PREFIX + "tez.attempts." + containerId, "");
        boolean first = true;
        int rc = 0;
        for (String attempt : list.split(",")) {
            if (attempt.isEmpty()) {
                continue;
            }
            long t = System.currentTimeMillis();
            Log al = Log.file(new File(logDir, "syslog_" + attempt), "task.TezTaskRunner2", true);
            al.info("Running task, taskAttemptId=" + attempt);
            log.info("Got a task: " + attempt);
            Params p = Params.resolve(conf, attempt);
            Work.run(p, first ? start : t, al, null);
            first = false;
            al.info("Task completed, taskAttemptId=" + attempt);
            rc = p.exitCode;
        }
        log.info("Shutdown invoked for container " + containerId);
        System.exit(rc);
    }
}
