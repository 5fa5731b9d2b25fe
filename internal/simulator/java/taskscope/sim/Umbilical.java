package taskscope.sim;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

/** The simulator's TaskUmbilicalProtocol: one line out, one line back, one connection per call. */
public final class Umbilical {
    private final String host;
    private final int port;

    public Umbilical(String host, int port) {
        this.host = host;
        this.port = port;
    }

    public String call(String line) throws IOException {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(host, port), 2000);
            s.setSoTimeout(5000);
            OutputStream out = s.getOutputStream();
            out.write((line + "\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
            String r = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8)).readLine();
            if (r == null) {
                throw new IOException("umbilical closed the connection");
            }
            return r;
        }
    }
}
