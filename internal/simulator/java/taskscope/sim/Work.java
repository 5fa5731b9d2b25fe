package taskscope.sim;

import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;

/** What a simulated task does with its JVM: CPU, memory, leaks, GC pressure, file IO. */
public final class Work {
    private Work() {}

    /** Leaked memory stays until the JVM exits, through the attempts a reused JVM runs. */
    private static final List<byte[]> LEAKED = new ArrayList<>();
    private static volatile Object sink;

    /** The CPU this process has used, user + system, in milliseconds (from /proc/self/stat, as the kernel counts it). */
    public static long processCpuMs() {
        try {
            String s = new String(Files.readAllBytes(Paths.get("/proc/self/stat")), StandardCharsets.US_ASCII);
            String[] f = s.substring(s.lastIndexOf(')') + 2).split(" ");
            // after the comm: state(3) ppid(4) ... utime(14) stime(15): indexes 11 and 12 here
            long ticks = Long.parseLong(f[11]) + Long.parseLong(f[12]);
            return ticks * 10; // USER_HZ is 100 on Linux
        } catch (IOException | RuntimeException e) {
            return 0;
        }
    }

    /** Allocates and touches mb megabytes that stay reachable. */
    static void hold(List<byte[]> into, long mb) {
        for (long i = 0; i < mb; i++) {
            byte[] b = new byte[1 << 20];
            for (int j = 0; j < b.length; j += 4096) {
                b[j] = 1;
            }
            synchronized (into) {
                into.add(b);
            }
        }
    }

    /**
     * Spins until the process CPU reaches targetMs: the task's hot loop,
     * where a profile finds its CPU (the CPU is read every million rounds,
     * a few milliseconds: a sliver of the time).
     */
    public static void burnUntil(long targetMs) {
        long x = 1;
        while (processCpuMs() < targetMs) {
            for (int i = 0; i < 1_000_000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
            }
            sink = x;
        }
    }

    /** Churns garbage (a heap nearly full of live data makes the collector run all the time) until the CPU target. */
    static void churnUntil(long targetMs) {
        Object[] ring = new Object[512];
        int k = 0;
        while (processCpuMs() < targetMs) {
            for (int i = 0; i < 2000; i++) {
                ring[k] = new byte[8 << 10];
                k = (k + 1) % ring.length;
            }
        }
        sink = ring;
    }

    /**
     * Waits ms in small sleeps: a stand-in for reading input from a slow
     * disk or network, where a profile shows the task's time going.
     */
    public static void readInput(long ms) {
        long end = System.currentTimeMillis() + ms;
        for (long left = ms; left > 0; left = end - System.currentTimeMillis()) {
            try {
                Thread.sleep(Math.min(left, 50));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    private static final Object LOCK = new Object();

    /** Holds LOCK for ms (in a thread of its own, while the task waits for it). */
    static void holdLock(long ms, java.util.concurrent.CountDownLatch held) {
        synchronized (LOCK) {
            held.countDown();
            readInput(ms);
        }
    }

    /** Waits about ms for LOCK, which a thread "lock-holder" holds that long. */
    public static void awaitLock(long ms) {
        java.util.concurrent.CountDownLatch held = new java.util.concurrent.CountDownLatch(1);
        Thread h = new Thread(() -> holdLock(ms, held), "lock-holder");
        h.setDaemon(true);
        h.start();
        try {
            held.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return;
        }
        synchronized (LOCK) {
            sink = LOCK;
        }
    }

    /** Parks forever: the idle threads of a JVM of many threads. */
    static void idle() {
        while (true) {
            java.util.concurrent.locks.LockSupport.park();
        }
    }

    private static int idleStarted;

    /** Starts idle threads, up to n in the JVM's life (a reused JVM keeps its own). */
    static synchronized void startIdle(long n) {
        for (; idleStarted < n; idleStarted++) {
            Thread t = new Thread(Work::idle, "sim-idle-" + idleStarted);
            t.setDaemon(true);
            t.start();
        }
    }

    /** Writes mb megabytes under dir, syncs, reads them back and removes the file. */
    static void io(File dir, long mb, Log log) {
        if (mb <= 0) {
            return;
        }
        dir.mkdirs();
        File f = new File(dir, "taskscope-sim-io-" + ProcessHandle.current().pid() + ".dat");
        byte[] buf = new byte[1 << 20];
        for (int i = 0; i < buf.length; i++) {
            buf[i] = (byte) i;
        }
        try (RandomAccessFile raf = new RandomAccessFile(f, "rw")) {
            for (long i = 0; i < mb; i++) {
                raf.write(buf);
            }
            raf.getFD().sync();
            raf.seek(0);
            while (raf.read(buf) > 0) {
                // read back
            }
        } catch (IOException e) {
            log.warn("io: " + e);
        } finally {
            f.delete();
        }
    }

    /**
     * Runs one attempt's work: p.cpuMs of CPU on top of what the process
     * has used when it starts (the JVM's own start, which a loaded machine
     * makes cost anything from 0.2 to 1.5 s, is not the task's work; it is
     * logged so that tests can add it). Returns the process CPU when it ended.
     */
    public static long run(Params p, long startMs, Log log, Runnable during) {
        if (p.nice > 0) {
            // The session's group (each container is a session): the
            // attempt gets little of a CPU its neighbours keep busy.
            try {
                Files.write(Paths.get("/proc/self/autogroup"), Long.toString(p.nice).getBytes(StandardCharsets.US_ASCII));
            } catch (IOException e) {
                log.warn("autogroup nice: " + e);
            }
        }
        long cpuBaseMs = processCpuMs();
        log.info("taskscope simulator work start: process cpu " + cpuBaseMs + " ms");
        log.info("taskscope simulator work: " + p);
        List<byte[]> held = new ArrayList<>(); // the attempt's working set, released when it ends
        hold(held, p.memMb);
        Thread leaker = null;
        if (p.leakMbPerSec > 0) {
            leaker = new Thread(() -> {
                long t0 = System.currentTimeMillis();
                long leaked = 0;
                try {
                    while (!Thread.currentThread().isInterrupted()) {
                        Thread.sleep(100);
                        long want = p.leakMbPerSec * (System.currentTimeMillis() - t0) / 1000;
                        hold(LEAKED, want - leaked);
                        leaked = Math.max(leaked, want);
                    }
                } catch (InterruptedException e) {
                    // attempt over
                } catch (OutOfMemoryError e) {
                    log.warn("leak: " + e);
                }
            }, "leak");
            leaker.setDaemon(true);
            leaker.start();
        }
        io(new File(System.getProperty("java.io.tmpdir", "tmp")), p.ioMb, log);
        if (during != null) {
            during.run();
        }
        startIdle(p.threads);
        if (p.inputWaitMs > 0) {
            readInput(p.inputWaitMs);
        }
        if (p.lockWaitMs > 0) {
            awaitLock(p.lockWaitMs);
        }
        long target = cpuBaseMs + p.cpuMs;
        if (p.gcBound) {
            churnUntil(target);
        } else {
            burnUntil(target);
        }
        long left = startMs + p.holdMs - System.currentTimeMillis();
        if (left > 0) {
            log.info("work burnt; holding on for " + left + " ms");
            try {
                Thread.sleep(left);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        if (leaker != null) {
            leaker.interrupt();
        }
        if (p.gcBound) {
            long n = 0, ms = 0;
            for (java.lang.management.GarbageCollectorMXBean gc : java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()) {
                n += gc.getCollectionCount();
                ms += gc.getCollectionTime();
            }
            log.info("gc: " + n + " collections, " + ms + " ms");
        }
        long cpu = processCpuMs();
        log.info("taskscope simulator work done: process cpu " + cpu + " ms, held " + held.size() + " MB, leaked " + LEAKED.size() + " MB");
        held.clear();
        return cpu;
    }

    /** Sleeps forever (a JVM hung before it asked for its task). */
    public static void hang() {
        while (true) {
            try {
                Thread.sleep(60_000);
            } catch (InterruptedException e) {
                // keep hanging
            }
        }
    }
}
