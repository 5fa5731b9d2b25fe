// Busy is the JVM of package hotspot's tests: its main thread spins in
// Busy.spin, a thread "holder" sleeps in Busy.hold holding a lock that a
// thread "blocked" waits for in Busy.enter, and it exits after args[0]
// milliseconds (0: never). It prints "ready" once its threads run.
public final class Busy {
    static final Object LOCK = new Object();
    static volatile long sink;

    static void spin(long until) {
        long x = 1;
        while (until == 0 || System.currentTimeMillis() < until) {
            for (int i = 0; i < 100_000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
            }
            sink = x;
        }
    }

    static void hold() {
        synchronized (LOCK) {
            try {
                Thread.sleep(Long.MAX_VALUE);
            } catch (InterruptedException e) {
                // end
            }
        }
    }

    static void enter() {
        synchronized (LOCK) {
            sink = 1;
        }
    }

    public static void main(String[] args) throws Exception {
        long ms = args.length > 0 ? Long.parseLong(args[0]) : 0;
        Thread h = new Thread(Busy::hold, "holder");
        h.setDaemon(true);
        h.start();
        Thread.sleep(50);
        Thread b = new Thread(Busy::enter, "blocked");
        b.setDaemon(true);
        b.start();
        System.out.println("ready");
        System.out.flush();
        spin(ms == 0 ? 0 : System.currentTimeMillis() + ms);
    }
}
