package jet.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * The options of the jetstream-jvm reader: a subset of the Python source's
 * (spec/spark.md). Any other option of the Python source is refused with a message that
 * names format "jetstream", which has them all (jetspark.jvm.source_format picks it).
 */
final class JetOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  /** Options (lower case) this reader takes. */
  static final Set<String> SUPPORTED = new HashSet<>(Arrays.asList(
      "servers", "streams", "startingoffsets", "endingoffsets", "failondataloss",
      "fetchmaxbytes", "requesttimeout", "maxrecordspertrigger", "maxoffsetspertrigger",
      "minpartitions", "fetchstream", "grouppartitions", "readahead", "includeheaders", "token", "user",
      "password", "tls", "tlsca", "tlscert", "tlskey", "tlsserverhostname", "path",
      "checkpointlocation", "queryname"));

  /** Options of the Python source (lower case) this reader does not take. */
  static final Set<String> PYTHON_ONLY = new HashSet<>(Arrays.asList(
      "streamspattern", "startingtimestamp", "startingoffsetsbytimestamp",
      "startingoffsetsbytimestampstrategy", "endingtimestamp", "endingoffsetsbytimestamp",
      "maxbytespertrigger", "minoffsetspertrigger", "maxtriggerdelay",
      "maxbytesperpartition", "group", "subjects", "table", "nkeyseed", "credentials"));

  /**
   * Record bytes asked for per Fetch answer: the server's default limits.max_fetch_bytes
   * (8 MiB), twice the Python source's 4 MiB (whose Arrow batches gained nothing above it);
   * fewer, larger answers took the JVM 4-12% less CPU a query at 16 KiB values (issue 39,
   * bench/bench_spark.py).
   */
  static final long DEFAULT_FETCH_MAX_BYTES = 8L * 1024 * 1024;

  final List<String> servers;
  final List<String> streams;
  final String starting;
  final String ending;
  final boolean failOnDataLoss;
  final int fetchMaxBytes;
  final int timeoutMs;
  final long maxRecordsPerTrigger;
  final int minPartitions;
  /** Read with FetchStream where the server has it (else Fetch requests). */
  final boolean fetchStream;
  /** One task reads several ranges when they outnumber Spark's task slots. */
  final boolean groupPartitions;
  /** A thread of the task's reads answers ahead while it builds rows ({@link JetAhead}). */
  final boolean readAhead;
  /** The rows have the headers column (option includeHeaders). */
  final boolean includeHeaders;
  /**
   * The Authenticate request (spec/protocol.md, "10 Authenticate") for option token or
   * user + password, sent where a server requires authentication; null without them.
   */
  final java.util.LinkedHashMap<String, String> auth;
  /** Connect with TLS (option tls, or any of the TLS files given; {@link JetTls}). */
  final boolean tls;
  /** PEM files: the CA bundle (null: the JVM's trusted CAs), the client certificate and key. */
  final String tlsCa;
  final String tlsCert;
  final String tlsKey;
  /** The name checked against server certificates (null: each address's host). */
  final String tlsServerHostname;

  JetOptions(Map<String, String> raw, boolean streaming) {
    Map<String, String> o = new java.util.HashMap<>();
    for (Map.Entry<String, String> e : raw.entrySet()) {
      String key = e.getKey().toLowerCase(Locale.ROOT);
      if (!SUPPORTED.contains(key) && PYTHON_ONLY.contains(key)) {
        throw new IllegalArgumentException("jetstream-jvm does not take option " + e.getKey()
            + ": use format \"jetstream\" (the Python reader), which does");
      }
      o.put(key, e.getValue());
    }
    String text = o.getOrDefault("servers", System.getenv().getOrDefault("JET_SERVERS", ""));
    servers = split(text);
    if (servers.isEmpty()) {
      throw new IllegalArgumentException(
          "jetstream-jvm option servers: required: comma-separated host:port list");
    }
    streams = split(o.getOrDefault("streams", ""));
    if (streams.isEmpty()) {
      throw new IllegalArgumentException("jetstream-jvm option streams: required");
    }
    starting = o.getOrDefault("startingoffsets", streaming ? "latest" : "earliest").trim();
    ending = o.getOrDefault("endingoffsets", "latest").trim();
    if (streaming && o.containsKey("endingoffsets")) {
      throw new IllegalArgumentException(
          "jetstream-jvm option endingOffsets: only for batch reads (spark.read)");
    }
    failOnDataLoss = !"false".equalsIgnoreCase(o.getOrDefault("failondataloss", "true").trim());
    fetchMaxBytes = (int) positive(o, "fetchmaxbytes", DEFAULT_FETCH_MAX_BYTES);
    String timeout = o.get("requesttimeout");
    timeoutMs = timeout == null ? 30_000 : (int) (Double.parseDouble(timeout.trim()) * 1000);
    long rows = positive(o, "maxrecordspertrigger", 0);
    if (rows == 0) {
      rows = positive(o, "maxoffsetspertrigger", 0);
    }
    maxRecordsPerTrigger = rows;
    minPartitions = (int) positive(o, "minpartitions", 0);
    fetchStream = flag(o, "fetchstream");
    groupPartitions = flag(o, "grouppartitions");
    readAhead = flag(o, "readahead");
    includeHeaders = includeHeaders(raw);
    auth = auth(o);
    tlsCa = nonEmpty(o, "tlsca", "tlsCa");
    tlsCert = nonEmpty(o, "tlscert", "tlsCert");
    tlsKey = nonEmpty(o, "tlskey", "tlsKey");
    tlsServerHostname = nonEmpty(o, "tlsserverhostname", "tlsServerHostname");
    boolean files = tlsCa != null || tlsCert != null || tlsKey != null;
    if (o.containsKey("tls") && !flag(o, "tls", "false") && files) {
      throw new IllegalArgumentException(
          "jetstream-jvm option tls: is false but tlsCa, tlsCert or tlsKey is given");
    }
    tls = flag(o, "tls", "false") || files;
    if ((tlsCert == null) != (tlsKey == null)) {
      throw new IllegalArgumentException("jetstream-jvm option "
          + (tlsKey == null ? "tlsKey" : "tlsCert") + ": tlsCert and tlsKey go together");
    }
    if (tlsServerHostname != null && !tls) {
      throw new IllegalArgumentException("jetstream-jvm option tlsServerHostname: only with TLS"
          + " (tls=true or a tls* file)");
    }
  }

  /** Option {@code key} (lower case), null if absent; refused if empty. */
  private static String nonEmpty(Map<String, String> o, String key, String name) {
    String text = o.get(key);
    if (text != null && text.trim().isEmpty()) {
      throw new IllegalArgumentException("jetstream-jvm option " + name + ": must not be empty");
    }
    return text == null ? null : text.trim();
  }

  /** Option includeHeaders of {@code raw} (any case). */
  static boolean includeHeaders(Map<String, String> raw) {
    for (Map.Entry<String, String> e : raw.entrySet()) {
      if (e.getKey().equalsIgnoreCase("includeheaders")) {
        return flag(Map.of("includeheaders", e.getValue()), "includeheaders", "false");
      }
    }
    return false;
  }

  private static java.util.LinkedHashMap<String, String> auth(Map<String, String> o) {
    for (String key : new String[] {"token", "user", "password"}) {
      if (o.containsKey(key) && o.get(key).trim().isEmpty()) {
        throw new IllegalArgumentException("jetstream-jvm option " + key + ": must not be empty");
      }
    }
    String token = o.get("token");
    String user = o.get("user");
    String password = o.get("password");
    if (token != null && (user != null || password != null)) {
      throw new IllegalArgumentException(
          "jetstream-jvm option token: give either token or user + password, not both");
    }
    if ((user == null) != (password == null)) {
      throw new IllegalArgumentException("jetstream-jvm option "
          + (password == null ? "password" : "user") + ": user and password go together");
    }
    if (token == null && user == null) {
      return null;
    }
    java.util.LinkedHashMap<String, String> req = new java.util.LinkedHashMap<>();
    if (token != null) {
      req.put("mechanism", "token");
      req.put("token", token);
    } else {
      req.put("mechanism", "password");
      req.put("user", user);
      req.put("password", password);
    }
    return req;
  }

  private static boolean flag(Map<String, String> o, String key) {
    return flag(o, key, "true");
  }

  private static boolean flag(Map<String, String> o, String key, String dflt) {
    String text = o.getOrDefault(key, dflt).trim();
    if (!text.equalsIgnoreCase("true") && !text.equalsIgnoreCase("false")) {
      throw new IllegalArgumentException("jetstream-jvm option " + key + ": true or false");
    }
    return text.equalsIgnoreCase("true");
  }

  private static long positive(Map<String, String> o, String key, long dflt) {
    String text = o.get(key);
    if (text == null) {
      return dflt;
    }
    long value = Long.parseLong(text.trim());
    if (value < 1) {
      throw new IllegalArgumentException("jetstream-jvm option " + key + ": must be >= 1");
    }
    return value;
  }

  private static List<String> split(String text) {
    List<String> out = new ArrayList<>();
    for (String s : text.split(",")) {
      if (!s.trim().isEmpty()) {
        out.add(s.trim());
      }
    }
    return out;
  }
}
