package taskscope.sim;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

/**
 * An ApplicationMaster stand-in (MRAppMaster, Spark's ExecutorLauncher, Tez's
 * DAGAppMaster): it does its own bit of work, listens on its umbilical port
 * and exits 0 when the simulator, acting as the ResourceManager, sends "finish".
 */
public final class AppMaster {
    private AppMaster() {}

    public static void run(Conf conf, String unit, Log log) {
        long start = System.currentTimeMillis();
        Params p = Params.resolve(conf, unit);
        p.holdMs = 0;
        int port = (int) conf.getLong(Params.PREFIX + "am.port", 0);
        ServerSocket ss;
        try {
            ss = new ServerSocket(port, 50, InetAddress.getLoopbackAddress());
        } catch (IOException e) {
            log.warn("cannot listen on port " + port + ": " + e + "; using any port");
            try {
                ss = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            } catch (IOException e2) {
                log.warn("cannot listen: " + e2);
                Work.hang();
                return;
            }
        }
        log.info("Instantiated umbilical server at 127.0.0.1:" + ss.getLocalPort());
        Work.run(p, start, log, null);
        while (true) {
            try (Socket s = ss.accept()) {
                s.setSoTimeout(5000);
                BufferedReader r = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
                String line = r.readLine();
                OutputStream out = s.getOutputStream();
                if ("finish".equals(line)) {
                    out.write("ok\n".getBytes(StandardCharsets.UTF_8));
                    out.flush();
                    log.info("Final Stats: job finished; ApplicationMaster exiting");
                    System.exit(p.exitCode);
                }
                out.write("ok\n".getBytes(StandardCharsets.UTF_8));
            } catch (IOException e) {
                log.warn("umbilical: " + e);
            }
        }
    }
}
