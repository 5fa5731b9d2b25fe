package taskscope.sim;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.io.UnsupportedEncodingException;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Hadoop Streaming's PipeMapRed, reduced to what shows in /proc: a brief
 * `env` child, the mapper or reducer command started with ProcessBuilder in
 * the JVM's working directory, with the JVM's environment plus every job
 * configuration key (non-alphanumerics turned into '_'), fed records on stdin.
 */
public final class Streaming {
    private Streaming() {}

    /** The streaming command for this task type, or null when the job is not a streaming job. */
    public static String command(Conf job, boolean isMap) {
        String enc = job.map.get(isMap ? "stream.map.streamprocessor" : "stream.reduce.streamprocessor");
        if (enc == null || enc.isEmpty()) {
            return null;
        }
        try {
            return URLDecoder.decode(enc, "UTF-8");
        } catch (UnsupportedEncodingException e) {
            return enc;
        }
    }

    static String safeEnvVarName(String var) {
        StringBuilder sb = new StringBuilder(var.length());
        for (int i = 0; i < var.length(); i++) {
            char c = var.charAt(i);
            sb.append(((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) ? c : '_');
        }
        return sb.toString();
    }

    /** Runs the command to completion and returns its exit status. */
    public static int run(String cmd, Conf job, int records, Log log) throws IOException, InterruptedException {
        // Environment(): PipeMapRed learns the environment by running `env`.
        Process env = Runtime.getRuntime().exec(new String[] {"env"});
        env.getOutputStream().close();
        int envVars = 0;
        try (BufferedReader r = new BufferedReader(new InputStreamReader(env.getInputStream(), StandardCharsets.UTF_8))) {
            while (r.readLine() != null) {
                envVars++;
            }
        }
        env.waitFor();

        Map<String, String> childEnv = new HashMap<>(System.getenv());
        for (Map.Entry<String, String> e : job.map.entrySet()) {
            childEnv.put(safeEnvVarName(e.getKey()), e.getValue());
        }
        childEnv.put("TMPDIR", System.getProperty("java.io.tmpdir"));

        String[] argv = cmd.trim().split("\\s+");
        File cwd = new File(".").getAbsoluteFile().getParentFile();
        if (!new File(argv[0]).isAbsolute()) {
            File local = new File(cwd, argv[0]);
            if (local.exists()) {
                // FileUtil.chmod(..., "a+x") forks chmod, as in Hadoop 2.
                Process chmod = new ProcessBuilder("chmod", "a+x", local.getPath()).start();
                chmod.waitFor();
            }
            File found = lookPath(argv[0], cwd, childEnv.get("PATH"));
            if (found != null) {
                argv[0] = found.getAbsolutePath();
            }
        }
        log.info("PipeMapRed exec " + Arrays.toString(argv) + " (env had " + envVars + " variables)");
        ProcessBuilder pb = new ProcessBuilder(argv);
        pb.environment().clear();
        pb.environment().putAll(childEnv);
        Process sim = pb.start();

        Thread err = pump(sim.getErrorStream(), System.err, "MRErrorThread");
        Thread out = pump(sim.getInputStream(), null, "MROutputThread");
        try (OutputStream in = sim.getOutputStream()) {
            PrintStream ps = new PrintStream(in, false, "UTF-8");
            for (int i = 0; i < records; i++) {
                ps.print(i);
                ps.print('\t');
                ps.print("taskscope simulator record ");
                ps.println(i * 7919 % 1000);
            }
            ps.flush();
        } catch (IOException e) {
            log.warn("PipeMapRed: " + e);
        }
        int rc = sim.waitFor();
        out.join();
        err.join();
        log.info("PipeMapRed: exit code " + rc);
        return rc;
    }

    private static File lookPath(String prog, File cwd, String path) {
        List<String> dirs = new ArrayList<>();
        dirs.add(cwd.getPath());
        if (path != null) {
            dirs.addAll(Arrays.asList(path.split(":")));
        }
        for (String d : dirs) {
            File f = new File(d, prog);
            if (f.isFile() && f.canExecute()) {
                return f;
            }
            if (f.isFile() && d.equals(cwd.getPath())) {
                return f;
            }
        }
        return null;
    }

    private static Thread pump(InputStream in, PrintStream to, String name) {
        Thread t = new Thread(() -> {
            byte[] buf = new byte[8192];
            try {
                int n;
                while ((n = in.read(buf)) > 0) {
                    if (to != null) {
                        to.write(buf, 0, n);
                    }
                }
            } catch (IOException e) {
                // the child went away
            }
        }, name);
        t.setDaemon(true);
        t.start();
        return t;
    }
}
