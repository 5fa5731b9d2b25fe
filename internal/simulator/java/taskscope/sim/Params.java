package taskscope.sim;

/**
 * The work one attempt does, from the job configuration. Every key may be
 * overridden for one unit (a task such as m_000003, a Tez attempt, a Spark
 * executor exec_2) by appending "." + unit to it.
 */
public final class Params {
    public static final String PREFIX = "taskscope.sim.";

    public long cpuMs;          // CPU of the JVM process, counted from its start for its first attempt
    public long memMb;          // memory held for the whole attempt
    public long leakMbPerSec;   // memory added (and kept) while the attempt runs
    public boolean gcBound;     // burn the CPU by churning garbage in a full heap
    public long ioMb;           // written, synced, read back, removed
    public long holdMs;         // the attempt lasts at least this long (wall clock)
    public long streamCpuMs;    // CPU the streaming script burns itself
    public long streamChildren; // short-lived children the streaming script forks
    public int exitCode;        // what the JVM exits with at the end
    public long nice;           // the nice value of the attempt's session's scheduling group (/proc/self/autogroup), 0: left
    public long inputWaitMs;    // the main thread waits this long in Work.readInput (a sleep standing for slow input IO)
    public long lockWaitMs;     // the main thread waits this long in Work.awaitLock for a lock a thread of its own holds in Work.holdLock
    public long threads;        // more threads, idle (parked in Work.idle): a JVM of many threads

    /** Resolves the parameters; the first of units with an override of a key wins. */
    public static Params resolve(Conf c, String... units) {
        Params p = new Params();
        p.cpuMs = get(c, "cpu.ms", units, 0);
        p.memMb = get(c, "mem.mb", units, 0);
        p.leakMbPerSec = get(c, "leak.mb.per.s", units, 0);
        p.gcBound = "true".equals(getS(c, "gc", units));
        p.ioMb = get(c, "io.mb", units, 0);
        p.holdMs = get(c, "hold.ms", units, 0);
        p.streamCpuMs = get(c, "stream.cpu.ms", units, 0);
        p.streamChildren = get(c, "stream.children", units, 0);
        p.exitCode = (int) get(c, "exit.code", units, 0);
        p.nice = get(c, "nice", units, 0);
        p.inputWaitMs = get(c, "input.wait.ms", units, 0);
        p.lockWaitMs = get(c, "lock.wait.ms", units, 0);
        p.threads = get(c, "threads", units, 0);
        return p;
    }

    private static String getS(Conf c, String key, String[] units) {
        for (String u : units) {
            String v = c.map.get(PREFIX + key + "." + u);
            if (v != null) {
                return v;
            }
        }
        return c.map.get(PREFIX + key);
    }

    private static long get(Conf c, String key, String[] units, long def) {
        String v = getS(c, key, units);
        if (v == null) {
            return def;
        }
        try {
            return Long.parseLong(v.trim());
        } catch (NumberFormatException e) {
            return def;
        }
    }

    /** Puts the resolved values into the conf (taskscope.sim.attempt.*) for streaming scripts, which see them as env. */
    public void export(Conf c) {
        c.set(PREFIX + "attempt.cpu.ms", Long.toString(cpuMs));
        c.set(PREFIX + "attempt.stream.cpu.ms", Long.toString(streamCpuMs));
        c.set(PREFIX + "attempt.stream.children", Long.toString(streamChildren));
    }

    @Override
    public String toString() {
        return "cpu.ms=" + cpuMs + " mem.mb=" + memMb + " leak.mb.per.s=" + leakMbPerSec + " gc=" + gcBound
            + " io.mb=" + ioMb + " hold.ms=" + holdMs + " stream.cpu.ms=" + streamCpuMs
            + " stream.children=" + streamChildren + " nice=" + nice + " input.wait.ms=" + inputWaitMs
            + " lock.wait.ms=" + lockWaitMs + " threads=" + threads;
    }
}
