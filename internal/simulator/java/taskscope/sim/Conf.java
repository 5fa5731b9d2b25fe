package taskscope.sim;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A job configuration: Hadoop XML (job.xml), Spark properties
 * (__spark_conf__.properties) or Tez protobuf (tez-conf.pb). Only what the
 * stand-ins need; no XML library is loaded, to keep JVM start cheap.
 */
public final class Conf {
    public final LinkedHashMap<String, String> map = new LinkedHashMap<>();

    private static final Pattern PROPERTY = Pattern.compile("<property>(.*?)</property>", Pattern.DOTALL);
    private static final Pattern NAME = Pattern.compile("<name>(.*?)</name>", Pattern.DOTALL);
    private static final Pattern VALUE = Pattern.compile("<value>(.*?)</value>", Pattern.DOTALL);

    public static Conf readXml(File f) throws IOException {
        String s = new String(Files.readAllBytes(f.toPath()), StandardCharsets.UTF_8);
        Conf c = new Conf();
        Matcher m = PROPERTY.matcher(s);
        while (m.find()) {
            String p = m.group(1);
            Matcher n = NAME.matcher(p);
            Matcher v = VALUE.matcher(p);
            if (!n.find()) {
                continue;
            }
            c.map.put(unescape(n.group(1).trim()), v.find() ? unescape(v.group(1).trim()) : "");
        }
        return c;
    }

    public static Conf readProperties(File f) throws IOException {
        Properties p = new Properties();
        try (InputStream in = new FileInputStream(f)) {
            p.load(in);
        }
        Conf c = new Conf();
        for (String k : p.stringPropertyNames()) {
            c.map.put(k, p.getProperty(k));
        }
        return c;
    }

    /** Reads Tez's ConfigurationProto: repeated PlanKeyValuePair confKeyValues = 1 {key = 1; value = 2}. */
    public static Conf readTezPb(File f) throws IOException {
        byte[] b = Files.readAllBytes(f.toPath());
        Conf c = new Conf();
        int[] pos = {0};
        while (pos[0] < b.length) {
            long tag = varint(b, pos);
            if ((tag & 7) != 2) {
                throw new IOException("tez-conf.pb: unexpected wire type " + (tag & 7));
            }
            int len = (int) varint(b, pos);
            int end = pos[0] + len;
            String key = null, value = "";
            while (pos[0] < end) {
                long t = varint(b, pos);
                int l = (int) varint(b, pos);
                String s = new String(b, pos[0], l, StandardCharsets.UTF_8);
                pos[0] += l;
                if ((t >>> 3) == 1) {
                    key = s;
                } else if ((t >>> 3) == 2) {
                    value = s;
                }
            }
            if (key != null && (tag >>> 3) == 1) {
                c.map.put(key, value);
            }
        }
        return c;
    }

    private static long varint(byte[] b, int[] pos) throws IOException {
        long v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (pos[0] >= b.length) {
                throw new IOException("truncated varint");
            }
            int x = b[pos[0]++] & 0xff;
            v |= (long) (x & 0x7f) << shift;
            if (x < 0x80) {
                return v;
            }
        }
        throw new IOException("bad varint");
    }

    /** Writes the configuration as Hadoop does (Configuration.writeXml), atomically. */
    public void writeXml(File f) throws IOException {
        StringBuilder sb = new StringBuilder();
        sb.append("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n<configuration>\n");
        for (Map.Entry<String, String> e : map.entrySet()) {
            sb.append("<property><name>").append(escape(e.getKey())).append("</name><value>")
                .append(escape(e.getValue())).append("</value><final>false</final><source>job.xml</source></property>\n");
        }
        sb.append("</configuration>\n");
        File tmp = new File(f.getPath() + ".tmp");
        Files.write(tmp.toPath(), sb.toString().getBytes(StandardCharsets.UTF_8));
        // Replaces the symbolic link the NodeManager made to the localized job.xml, like YarnChild.
        Files.move(tmp.toPath(), f.toPath(), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    public String get(String k, String def) {
        String v = map.get(k);
        return v == null ? def : v;
    }

    public long getLong(String k, long def) {
        String v = map.get(k);
        if (v == null || v.isEmpty()) {
            return def;
        }
        try {
            return Long.parseLong(v.trim());
        } catch (NumberFormatException e) {
            return def;
        }
    }

    public boolean getBool(String k) {
        return "true".equalsIgnoreCase(map.getOrDefault(k, "").trim());
    }

    public void set(String k, String v) {
        map.put(k, v);
    }

    static String escape(String s) {
        StringBuilder sb = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char ch = s.charAt(i);
            switch (ch) {
                case '<': sb.append("&lt;"); break;
                case '>': sb.append("&gt;"); break;
                case '&': sb.append("&amp;"); break;
                case '"': sb.append("&quot;"); break;
                default: sb.append(ch);
            }
        }
        return sb.toString();
    }

    static String unescape(String s) {
        if (s.indexOf('&') < 0) {
            return s;
        }
        StringBuilder sb = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char ch = s.charAt(i);
            int semi;
            if (ch != '&' || (semi = s.indexOf(';', i)) < 0) {
                sb.append(ch);
                continue;
            }
            String ent = s.substring(i + 1, semi);
            switch (ent) {
                case "lt": sb.append('<'); break;
                case "gt": sb.append('>'); break;
                case "amp": sb.append('&'); break;
                case "quot": sb.append('"'); break;
                case "apos": sb.append('\''); break;
                default:
                    if (ent.startsWith("#x")) {
                        sb.appendCodePoint(Integer.parseInt(ent.substring(2), 16));
                    } else if (ent.startsWith("#")) {
                        sb.appendCodePoint(Integer.parseInt(ent.substring(1)));
                    } else {
                        sb.append('&').append(ent).append(';');
                    }
            }
            i = semi;
        }
        return sb.toString();
    }

    static byte[] readAll(InputStream in) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] buf = new byte[8192];
        int n;
        while ((n = in.read(buf)) > 0) {
            out.write(buf, 0, n);
        }
        return out.toByteArray();
    }
}
