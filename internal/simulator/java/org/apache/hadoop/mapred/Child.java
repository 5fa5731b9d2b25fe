package org.apache.hadoop.mapred;

import java.io.File;
import java.io.IOException;
import taskscope.sim.Conf;
import taskscope.sim.Log;
import taskscope.sim.Params;
import taskscope.sim.Task;
import taskscope.sim.Umbilical;
import taskscope.sim.Work;

/**
 * Simulator stand-in for Hadoop 1's Child. argv: ttHost ttPort firstAttempt
 * logLocation jvmIdInt. Asks its TaskTracker for tasks (getTask, with the pid
 * from JVM_PID) until told to die, so that with JVM reuse one Child runs
 * several attempts; pings while a task runs and exits 65 after three failed
 * pings, like Task.TaskReporter; exits 66 when the TaskTracker is gone at
 * getTask ("Parent died"). A task that completes says so in the syslog as
 * Task.done does ("Task:<attempt> is done. And is in the process of
 * commiting", then "Task '<attempt>' done." once the TaskTracker took its
 * done); a task that fails is caught as Child's catch (Exception) does: it
 * logs "Error running child" with the exception and main returns, so the
 * JVM exits 0 (the TaskTracker fails the task: its JVM exited without its
 * done).
 */
public final class Child {
    private Child() {}

    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        String first = args[2];
        String logLocation = args[3];
        int jvmIdInt = Integer.parseInt(args[4]);
        Log log = Log.file(new File(logLocation, "syslog"), Child.class.getName(), false);
        String pid = System.getenv("JVM_PID");
        log.info("JVM " + jvmIdInt + " pid " + pid + " first task " + first);
        File firstConf = new File(new File(".").getAbsoluteFile().getParentFile().getParentFile(), "job.xml");
        if (firstConf.exists() && Conf.readXml(firstConf).getBool(Params.PREFIX + "child.hang")) {
            log.warn("hanging before getTask");
            Work.hang();
        }
        Umbilical u = new Umbilical(host, port);
        long start = System.currentTimeMillis();
        boolean firstRun = true;
        int failures = 0;
        while (true) {
            String r;
            try {
                r = u.call("getTask " + jvmIdInt + " " + pid);
                failures = 0;
            } catch (IOException e) {
                if (++failures >= 3) {
                    log.warn("Parent died.  Exiting " + first);
                    System.exit(66);
                }
                Thread.sleep(500);
                continue;
            }
            if (r.equals("die")) {
                log.info("JVM " + jvmIdInt + " asked to die");
                System.exit(0);
            }
            if (!r.startsWith("task ")) {
                Thread.sleep(200);
                continue;
            }
            String[] f = r.split(" ");
            String attempt = f[1];
            long t = System.currentTimeMillis();
            Conf job = Conf.readXml(new File(f[2]));
            Task.configure(job, attempt);
            log.info("Task " + attempt + " using conf " + f[2]);
            Thread pinger = pinger(u, attempt, log);
            // The first attempt holds on from the JVM's start, later ones from their own.
            int rc = Task.work(job, attempt, firstRun ? start : t, log);
            firstRun = false;
            pinger.interrupt();
            if (rc != 0) {
                log.warn("Error running child\njava.io.IOException: Task process exit with nonzero status of " + rc + ".\n"
                        + "\tat org.apache.hadoop.mapred.TaskRunner.run(TaskRunner.java:258)");
                log.info("Runnning cleanup for the task");
                return;
            }
            log.info("Task:" + attempt + " is done. And is in the process of commiting");
            try {
                u.call("done " + attempt + " " + rc);
            } catch (IOException e) {
                log.warn("cannot report done: " + e);
                return;
            }
            log.info("Task '" + attempt + "' done.");
        }
    }

    private static Thread pinger(Umbilical u, String attempt, Log log) {
        Thread t = new Thread(() -> {
            int remainingRetries = 3;
            while (!Thread.currentThread().isInterrupted()) {
                try {
                    Thread.sleep(1000);
                } catch (InterruptedException e) {
                    return;
                }
                try {
                    u.call("ping " + attempt);
                    remainingRetries = 3;
                } catch (IOException e) {
                    log.warn("Communication exception: " + e);
                    remainingRetries--;
                    if (remainingRetries == 0) {
                        log.warn("Last retry, killing " + attempt);
                        System.exit(65);
                    }
                }
            }
        }, "communication thread");
        t.setDaemon(true);
        t.start();
        return t;
    }
}
