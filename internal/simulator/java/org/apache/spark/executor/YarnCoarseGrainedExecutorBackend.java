package org.apache.spark.executor;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import taskscope.sim.Conf;
import taskscope.sim.Log;
import taskscope.sim.Params;
import taskscope.sim.Work;

/**
 * Simulator stand-in for Spark's YARN executor. argv: --driver-url u
 * --executor-id n --hostname h --cores c --app-id a --resourceProfileId r.
 * Runs its share of the tasks in `cores` threads; for PySpark each task goes to
 * a `python3 -m pyspark.daemon`, which forks a worker per task, as Spark's
 * PythonWorkerFactory does.
 */
public final class YarnCoarseGrainedExecutorBackend {
    private YarnCoarseGrainedExecutorBackend() {}

    public static void main(String[] args) throws Exception {
        long start = System.currentTimeMillis();
        String execId = "0";
        int cores = 1;
        for (int i = 0; i + 1 < args.length; i++) {
            if ("--executor-id".equals(args[i])) {
                execId = args[i + 1];
            } else if ("--cores".equals(args[i])) {
                cores = Integer.parseInt(args[i + 1]);
            }
        }
        Log log = Log.stderr("org.apache.spark.executor.YarnCoarseGrainedExecutorBackend");
        log.info("Started daemon with process name: " + ProcessHandle.current().pid() + "@" + System.getenv("NM_HOST"));
        Conf conf = Conf.readProperties(new File("__spark_conf__/__spark_conf__.properties"));
        String unit = "exec_" + execId;
        int tasks = (int) conf.getLong(Params.PREFIX + "spark.tasks." + unit, conf.getLong(Params.PREFIX + "spark.tasks", 1));
        boolean pyspark = conf.getBool(Params.PREFIX + "spark.pyspark");
        Params p = Params.resolve(conf, unit);
        long perTask = p.cpuMs;
        if (!pyspark) {
            // The JVM runs the tasks: its CPU target is all of them.
            p.cpuMs = perTask * tasks;
            final int threads = Math.max(1, cores);
            // On top of the JVM's start, as Work.run counts it.
            final long target = Work.processCpuMs() + p.cpuMs;
            Runnable spin = () -> {
                List<Thread> ts = new ArrayList<>();
                for (int i = 1; i < threads; i++) {
                    Thread t = new Thread(() -> Work.burnUntil(target), "Executor task launch worker for task " + i);
                    t.setDaemon(true);
                    t.start();
                    ts.add(t);
                }
            };
            Work.run(p, start, log, spin);
        } else {
            p.cpuMs = 0;
            final int threads = Math.max(1, cores);
            Work.run(p, start, log, () -> runPython(tasks, perTask, threads, log));
        }
        log.info("Driver commanded a shutdown");
        System.exit(p.exitCode);
    }

    private static void runPython(int tasks, long perTaskMs, int cores, Log log) {
        try {
            String python = System.getenv().getOrDefault("PYSPARK_PYTHON", "python3");
            ProcessBuilder pb = new ProcessBuilder(python, "-m", "pyspark.daemon");
            pb.redirectError(ProcessBuilder.Redirect.INHERIT);
            Process daemon = pb.start();
            BufferedReader r = new BufferedReader(new InputStreamReader(daemon.getInputStream(), StandardCharsets.UTF_8));
            int port = Integer.parseInt(r.readLine().trim());
            log.info("python daemon listening on " + port);
            AtomicInteger next = new AtomicInteger();
            List<Thread> ts = new ArrayList<>();
            for (int i = 0; i < cores; i++) {
                Thread t = new Thread(() -> {
                    while (next.getAndIncrement() < tasks) {
                        try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
                            OutputStream out = s.getOutputStream();
                            out.write((perTaskMs + "\n").getBytes(StandardCharsets.UTF_8));
                            out.flush();
                            new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8)).readLine();
                        } catch (Exception e) {
                            log.warn("python worker: " + e);
                        }
                    }
                }, "Executor task launch worker " + i);
                t.start();
                ts.add(t);
            }
            for (Thread t : ts) {
                t.join();
            }
            daemon.getOutputStream().close(); // the daemon exits when its stdin closes
            daemon.waitFor();
        } catch (Exception e) {
            log.warn("pyspark: " + e);
        }
    }
}
