package taskscope.sim;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.LocalDateTime;

/** A log4j-looking log file (syslog of a task). Lines start with the local time to the millisecond. */
public final class Log {
    private final PrintStream out;
    private final String logger;
    private final boolean tez;

    private Log(PrintStream out, String logger, boolean tez) {
        this.out = out;
        this.logger = logger;
        this.tez = tez;
    }

    /** Appends to file (created with its directory); falls back to stderr. */
    public static Log file(File f, String logger, boolean tezLayout) {
        try {
            File dir = f.getParentFile();
            if (dir != null) {
                dir.mkdirs();
            }
            return new Log(new PrintStream(new FileOutputStream(f, true), true, StandardCharsets.UTF_8.name()), logger, tezLayout);
        } catch (IOException e) {
            return new Log(System.err, logger, tezLayout);
        }
    }

    public static Log stderr(String logger) {
        return new Log(System.err, logger, false);
    }

    /** The container's syslog: ${yarn.app.container.log.dir}/${hadoop.root.logfile}. */
    public static Log container(String logger) {
        String dir = System.getProperty("yarn.app.container.log.dir");
        String name = System.getProperty("hadoop.root.logfile", "syslog");
        if (dir == null) {
            return stderr(logger);
        }
        return file(new File(dir, name), logger, false);
    }

    public synchronized void info(String msg) {
        line("INFO", msg);
    }

    public synchronized void warn(String msg) {
        line("WARN", msg);
    }

    private void line(String level, String msg) {
        LocalDateTime t = LocalDateTime.now();
        StringBuilder sb = new StringBuilder(64 + msg.length());
        sb.append(t.getYear()).append('-');
        two(sb, t.getMonthValue());
        sb.append('-');
        two(sb, t.getDayOfMonth());
        sb.append(' ');
        two(sb, t.getHour());
        sb.append(':');
        two(sb, t.getMinute());
        sb.append(':');
        two(sb, t.getSecond());
        sb.append(',');
        int ms = t.getNano() / 1_000_000;
        if (ms < 100) {
            sb.append('0');
        }
        if (ms < 10) {
            sb.append('0');
        }
        sb.append(ms);
        if (tez) {
            sb.append(" [").append(level).append("] [").append(Thread.currentThread().getName()).append("] |")
                .append(logger).append("|: ");
        } else {
            sb.append(' ').append(level).append(" [").append(Thread.currentThread().getName()).append("] ")
                .append(logger).append(": ");
        }
        sb.append(msg);
        out.println(sb);
    }

    private static void two(StringBuilder sb, int v) {
        if (v < 10) {
            sb.append('0');
        }
        sb.append(v);
    }
}
