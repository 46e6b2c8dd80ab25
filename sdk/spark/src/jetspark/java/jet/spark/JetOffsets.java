package jet.spark;

import java.io.IOException;
import java.util.Iterator;
import java.util.Map;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * A source offset: {stream: {partition: next offset}}, as the Python source checkpoints
 * it (jetspark.offsets), written as Python's json.dumps writes that dict, so a checkpoint
 * carries over between the two readers either way.
 */
final class JetOffsets extends Offset {
  final TreeMap<String, TreeMap<Integer, Long>> map;

  JetOffsets(TreeMap<String, TreeMap<Integer, Long>> map) {
    this.map = map;
  }

  static JetOffsets parse(String json) {
    TreeMap<String, TreeMap<Integer, Long>> out = new TreeMap<>();
    JsonNode root;
    try {
      root = JetWire.JSON.readTree(json);
    } catch (IOException e) {
      throw new IllegalArgumentException("a jetstream offset must be JSON: " + json, e);
    }
    if (!root.isObject()) {
      throw new IllegalArgumentException("a jetstream offset must be a JSON object: " + json);
    }
    for (Iterator<Map.Entry<String, JsonNode>> it = root.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> s = it.next();
      TreeMap<Integer, Long> parts = new TreeMap<>();
      for (Iterator<Map.Entry<String, JsonNode>> p = s.getValue().fields(); p.hasNext(); ) {
        Map.Entry<String, JsonNode> e = p.next();
        long offset = e.getValue().asLong(-1);
        if (!e.getValue().canConvertToLong() || offset < 0) {
          throw new IllegalArgumentException("bad jetstream offset " + s.getKey() + "/"
              + e.getKey() + ": " + e.getValue());
        }
        parts.put(Integer.parseInt(e.getKey()), offset);
      }
      out.put(s.getKey(), parts);
    }
    return new JetOffsets(out);
  }

  long get(String stream, int partition, long dflt) {
    TreeMap<Integer, Long> parts = map.get(stream);
    Long v = parts == null ? null : parts.get(partition);
    return v == null ? dflt : v;
  }

  @Override
  public String json() {
    StringBuilder b = new StringBuilder("{");
    boolean firstStream = true;
    for (Map.Entry<String, TreeMap<Integer, Long>> s : map.entrySet()) {
      if (!firstStream) {
        b.append(", ");
      }
      firstStream = false;
      b.append(quote(s.getKey())).append(": {");
      boolean first = true;
      for (Map.Entry<Integer, Long> p : s.getValue().entrySet()) {
        if (!first) {
          b.append(", ");
        }
        first = false;
        b.append('"').append(p.getKey()).append("\": ").append(p.getValue());
      }
      b.append('}');
    }
    return b.append('}').toString();
  }

  private static String quote(String s) {
    try {
      return JetWire.JSON.writeValueAsString(s);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }
}
