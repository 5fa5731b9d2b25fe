package taskscope.sim;

import java.io.File;
import java.io.IOException;

/** One MapReduce task attempt as a YarnChild or Child runs it. */
public final class Task {
    private Task() {}

    /** attempt_<ts>_<job>_<t>_<task>_<n> -> the parts. */
    public static String[] parts(String attempt) {
        return attempt.split("_");
    }

    public static boolean isMap(String attempt) {
        return "m".equals(parts(attempt)[3]);
    }

    /** The unit key job.xml overrides use: m_000003. */
    public static String unit(String attempt) {
        String[] p = parts(attempt);
        return p[3] + "_" + p[4];
    }

    public static String taskId(String attempt) {
        String[] p = parts(attempt);
        return "task_" + p[1] + "_" + p[2] + "_" + p[3] + "_" + p[4];
    }

    public static String jobId(String attempt) {
        String[] p = parts(attempt);
        return "job_" + p[1] + "_" + p[2];
    }

    /** Sets the task's own keys, under their Hadoop 2 names and the deprecated names Hadoop sets with them. */
    public static void configure(Conf job, String attempt) {
        boolean map = isMap(attempt);
        String partition = Integer.toString(Integer.parseInt(parts(attempt)[4]));
        job.set("mapreduce.task.attempt.id", attempt);
        job.set("mapred.task.id", attempt);
        job.set("mapreduce.task.id", taskId(attempt));
        job.set("mapred.tip.id", taskId(attempt));
        job.set("mapreduce.task.ismap", Boolean.toString(map));
        job.set("mapred.task.is.map", Boolean.toString(map));
        job.set("mapreduce.task.partition", partition);
        job.set("mapred.task.partition", partition);
        job.set("mapreduce.job.id", jobId(attempt));
        job.set("mapred.job.id", jobId(attempt));
        Params.resolve(job, attempt, unit(attempt)).export(job);
    }

    /** Runs the attempt's work: streaming command first when the job has one, then the JVM's own share. */
    public static int work(Conf job, String attempt, long start, Log log) {
        Params p = Params.resolve(job, attempt, unit(attempt));
        String cmd = Streaming.command(job, isMap(attempt));
        int[] rc = {0};
        Runnable during = null;
        if (cmd != null) {
            during = () -> {
                try {
                    rc[0] = Streaming.run(cmd, job, 200, log);
                } catch (IOException | InterruptedException e) {
                    log.warn("PipeMapRed failed: " + e);
                    rc[0] = 1;
                }
            };
        }
        Work.run(p, start, log, during);
        if (rc[0] != 0) {
            log.warn("PipeMapRed.waitOutputThreads(): subprocess failed with code " + rc[0]);
            return 1;
        }
        return p.exitCode;
    }

    static File cwd() {
        return new File(".").getAbsoluteFile().getParentFile();
    }
}
