// Work is the JVM of package sampler's tests, its time in known methods:
// the main thread on a CPU in Work.hotLoop; a thread "reader" sleeping in
// Work.readInput (a sleep standing for IO); a thread "waiter" blocked in
// Work.awaitLock on a lock that a thread "holder" keeps in Work.holdLock.
// args: [exit after ms (0: never)] [extra idle threads] [report every ms]
// With a report interval, it prints "done <rounds of the hot loop> <nanoTime>
// <the JVM's CPU time, ns>" that often: how much work the task gets done, in
// its time and in its CPU time (the benchmarks' measure of what profiles
// cost it).
public final class Work {
    static final Object LOCK = new Object();
    static volatile long sink;
    static volatile long rounds;

    static void hotLoop(long until) {
        long x = 1;
        while (until == 0 || System.currentTimeMillis() < until) {
            for (int i = 0; i < 100_000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
            }
            sink = x;
            rounds++;
        }
    }

    static void readInput() throws InterruptedException {
        Thread.sleep(50);
    }

    static void holdLock() {
        synchronized (LOCK) {
            try {
                Thread.sleep(Long.MAX_VALUE);
            } catch (InterruptedException e) {
                // end
            }
        }
    }

    static void awaitLock() {
        synchronized (LOCK) {
            sink = 2;
        }
    }

    static Thread daemon(Runnable r, String name) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        t.start();
        return t;
    }

    public static void main(String[] args) throws Exception {
        long ms = args.length > 0 ? Long.parseLong(args[0]) : 0;
        int idle = args.length > 1 ? Integer.parseInt(args[1]) : 0;
        long report = args.length > 2 ? Long.parseLong(args[2]) : 0;
        if (report > 0) {
            com.sun.management.OperatingSystemMXBean os =
                (com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean();
            daemon(() -> {
                try {
                    while (true) {
                        Thread.sleep(report);
                        System.out.println("done " + rounds + " " + System.nanoTime() + " " + os.getProcessCpuTime());
                        System.out.flush();
                    }
                } catch (InterruptedException e) {
                    // end
                }
            }, "reporter");
        }
        daemon(Work::holdLock, "holder");
        Thread.sleep(50);
        daemon(Work::awaitLock, "waiter");
        daemon(() -> {
            try {
                while (true) {
                    readInput();
                }
            } catch (InterruptedException e) {
                // end
            }
        }, "reader");
        for (int i = 0; i < idle; i++) {
            daemon(() -> {
                try {
                    Thread.sleep(Long.MAX_VALUE);
                } catch (InterruptedException e) {
                    // end
                }
            }, "idle-" + i);
        }
        System.out.println("ready");
        System.out.flush();
        hotLoop(ms == 0 ? 0 : System.currentTimeMillis() + ms);
    }
}
