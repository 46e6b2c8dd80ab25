package jet.spark;

import java.io.Closeable;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * Metadata and ListOffsets against a jet cluster (driver side), and the leader of a
 * partition (both sides). Connections are kept per server address until {@link #close}.
 */
final class JetClient implements Closeable {
  /** Log start and high watermark of one partition. */
  static final class Info {
    final long logStart;
    final long hw;

    Info(long logStart, long hw) {
      this.logStart = logStart;
      this.hw = hw;
    }
  }

  private final List<String> servers;
  private final JetOptions opts;
  private final Map<String, JetWire> wires = new HashMap<>();
  private final Map<String, String> addressOf = new HashMap<>();
  private final Map<String, String> leaderOf = new HashMap<>();
  private JsonNode meta;

  JetClient(JetOptions opts) {
    this.servers = opts.servers;
    this.opts = opts;
  }

  /** A connection to {@code address}, opened on first use. */
  JetWire wire(String address) throws IOException {
    JetWire w = wires.get(address);
    if (w == null) {
      w = new JetWire(address, opts);
      wires.put(address, w);
    }
    return w;
  }

  /** Forget a connection that failed (closed). */
  void drop(String address) {
    JetWire w = wires.remove(address);
    if (w != null) {
      try {
        w.close();
      } catch (IOException ignored) {
        // closing a broken connection
      }
    }
  }

  /** Fresh metadata from the first bootstrap server that answers. */
  JsonNode metadata() throws IOException {
    IOException last = null;
    for (String s : servers) {
      try {
        Map<String, Object> req = new LinkedHashMap<>();
        req.put("streams", null);
        meta = wire(s).callJson(JetWire.METADATA, req);
        addressOf.clear();
        for (JsonNode server : meta.path("servers")) {
          addressOf.put(server.path("id").asText(), server.path("address").asText());
        }
        leaderOf.clear();
        for (JsonNode st : meta.path("streams")) {
          for (JsonNode p : st.path("partitions")) {
            String leader = addressOf.get(p.path("leader").asText());
            if (leader != null) {
              leaderOf.put(st.path("name").asText() + "/" + p.path("partition").asInt(), leader);
            }
          }
        }
        return meta;
      } catch (IOException e) {
        drop(s);
        if (e instanceof JetServerError && !((JetServerError) e).retriable()) {
          throw e; // e.g. UNAUTHENTICATED: every server would say so
        }
        last = e;
      }
    }
    throw new IOException("jetstream-jvm: no server of " + servers + " answered"
        + (last == null ? "" : ": " + last.getMessage()), last);
  }

  /** The partitions of {@code stream}, or null if it does not exist. */
  List<Integer> partitions(String stream) throws IOException {
    if (meta == null) {
      metadata();
    }
    for (JsonNode st : meta.path("streams")) {
      if (st.path("name").asText().equals(stream)) {
        List<Integer> out = new ArrayList<>();
        for (JsonNode p : st.path("partitions")) {
          out.add(p.path("partition").asInt());
        }
        out.sort(null);
        return out;
      }
    }
    return null;
  }

  /** The address of the leader of {@code stream}/{@code partition} (a bootstrap server if unknown). */
  String leader(String stream, int partition) throws IOException {
    if (meta == null) {
      metadata();
    }
    String a = leaderOf.get(stream + "/" + partition);
    return a != null ? a : servers.get(0);
  }

  /**
   * Log start and high watermark of every partition of {@code streams} (absent streams left
   * out): the ListOffsets requests to each leader are sent at once, then their answers read.
   */
  Map<String, TreeMap<Integer, Info>> snapshot(List<String> streams, boolean require)
      throws IOException {
    IOException last = null;
    for (int attempt = 0; attempt < 5; attempt++) {
      try {
        return snapshotOnce(streams, require);
      } catch (IOException e) {
        close(); // answers of the other requests may be unread: fresh connections
        if (e instanceof JetServerError && !((JetServerError) e).retriable()) {
          throw e;
        }
        last = e;
      }
      pause(attempt);
    }
    throw last;
  }

  private Map<String, TreeMap<Integer, Info>> snapshotOnce(List<String> streams, boolean require)
      throws IOException {
    metadata();
    Map<String, List<String[]>> byLeader = new TreeMap<>();
    Map<String, TreeMap<Integer, Info>> out = new TreeMap<>();
    for (String stream : streams) {
      List<Integer> parts = partitions(stream);
      if (parts == null) {
        if (require) {
          throw new IllegalArgumentException(
              "jetstream-jvm option streams: stream(s) " + stream + " do not exist");
        }
        continue;
      }
      out.put(stream, new TreeMap<>());
      for (int p : parts) {
        byLeader.computeIfAbsent(leader(stream, p), k -> new ArrayList<>())
            .add(new String[] {stream, String.valueOf(p)});
      }
    }
    for (Map.Entry<String, List<String[]>> e : byLeader.entrySet()) {
      JetWire w = wire(e.getKey());
      List<String[]> parts = e.getValue();
      int[] ids = new int[parts.size()];
      for (int i = 0; i < ids.length; i++) {
        Map<String, Object> req = new LinkedHashMap<>();
        req.put("stream", parts.get(i)[0]);
        req.put("partition", Integer.parseInt(parts.get(i)[1]));
        req.put("position", "latest");
        ids[i] = w.send(JetWire.LIST_OFFSETS, JetWire.JSON.writeValueAsBytes(req));
      }
      byte[][] answers = w.receiveAll(JetWire.LIST_OFFSETS, ids);
      for (int i = 0; i < ids.length; i++) {
        JsonNode a = JetWire.JSON.readTree(answers[i]);
        out.get(parts.get(i)[0]).put(Integer.parseInt(parts.get(i)[1]),
            new Info(a.path("log_start").asLong(), a.path("hw").asLong()));
      }
    }
    return out;
  }

  static void pause(int attempt) throws IOException {
    try {
      Thread.sleep(Math.min(1000L, 50L << attempt));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("interrupted", e);
    }
  }

  @Override
  public void close() {
    for (String a : new ArrayList<>(wires.keySet())) {
      drop(a);
    }
  }
}
