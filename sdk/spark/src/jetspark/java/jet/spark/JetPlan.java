package jet.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * The driver's arithmetic, as the Python source's (jetspark._read, jetspark.offsets):
 * start and end offsets from the options, the latest offsets of a micro-batch, admission
 * control and the ranges of a batch.
 */
final class JetPlan {
  static final long EARLIEST = -2;
  static final long LATEST = -1;

  private JetPlan() {}

  /** {@code spec} (earliest, latest or JSON per partition) resolved against {@code snap}. */
  static TreeMap<String, TreeMap<Integer, Long>> resolve(
      String spec, String option, Map<String, TreeMap<Integer, JetClient.Info>> snap) {
    JsonNode given = null;
    boolean earliest = spec.equalsIgnoreCase("earliest");
    if (!earliest && !spec.equalsIgnoreCase("latest")) {
      try {
        given = JetWire.JSON.readTree(spec);
      } catch (IOException e) {
        throw new IllegalArgumentException("jetstream-jvm option " + option + ": " + spec
            + " is neither earliest, latest nor JSON like {\"s\": {\"0\": 5}}");
      }
      for (Iterator<String> it = given.fieldNames(); it.hasNext(); ) {
        String stream = it.next();
        if (!snap.containsKey(stream)) {
          throw new IllegalArgumentException(
              "jetstream-jvm option " + option + ": stream " + stream + " is not read");
        }
      }
    }
    TreeMap<String, TreeMap<Integer, Long>> out = new TreeMap<>();
    for (Map.Entry<String, TreeMap<Integer, JetClient.Info>> s : snap.entrySet()) {
      TreeMap<Integer, Long> parts = new TreeMap<>();
      JsonNode listed = given == null ? null : given.get(s.getKey());
      if (given != null && listed == null) {
        throw new IllegalArgumentException("jetstream-jvm option " + option + ": stream "
            + s.getKey() + " is not listed (list every stream read)");
      }
      for (Map.Entry<Integer, JetClient.Info> p : s.getValue().entrySet()) {
        JetClient.Info info = p.getValue();
        long offset;
        if (listed == null) {
          offset = earliest ? info.logStart : info.hw;
        } else {
          JsonNode v = listed.get(String.valueOf(p.getKey()));
          if (v == null) {
            throw new IllegalArgumentException("jetstream-jvm option " + option + ": "
                + s.getKey() + "/" + p.getKey() + " is not listed (list every partition)");
          }
          offset = v.asLong();
          if (offset == EARLIEST) {
            offset = info.logStart;
          } else if (offset == LATEST) {
            offset = info.hw;
          } else if (offset > info.hw) {
            throw new IllegalArgumentException("jetstream-jvm option " + option + ": "
                + s.getKey() + "/" + p.getKey() + ": offset " + offset
                + " is past the high watermark " + info.hw);
          }
        }
        parts.put(p.getKey(), offset);
      }
      out.put(s.getKey(), parts);
    }
    return out;
  }

  /**
   * The high watermarks of {@code snap}, checked against {@code begin} (the Python
   * source's _latest_offsets): with failOnDataLoss, a partition gone, truncated below
   * {@code begin} or with records removed past it fails the query.
   */
  static TreeMap<String, TreeMap<Integer, Long>> latest(
      Map<String, TreeMap<Integer, JetClient.Info>> snap, JetOffsets begin, boolean fail) {
    TreeMap<String, TreeMap<Integer, Long>> out = new TreeMap<>();
    for (Map.Entry<String, TreeMap<Integer, JetClient.Info>> s : snap.entrySet()) {
      TreeMap<Integer, Long> parts = new TreeMap<>();
      for (Map.Entry<Integer, JetClient.Info> p : s.getValue().entrySet()) {
        parts.put(p.getKey(), p.getValue().hw);
      }
      out.put(s.getKey(), parts);
    }
    for (Map.Entry<String, TreeMap<Integer, Long>> s : begin.map.entrySet()) {
      for (Map.Entry<Integer, Long> p : s.getValue().entrySet()) {
        String where = s.getKey() + "/" + p.getKey();
        TreeMap<Integer, JetClient.Info> infos = snap.get(s.getKey());
        JetClient.Info info = infos == null ? null : infos.get(p.getKey());
        long offset = p.getValue();
        if (info == null) {
          if (fail) {
            throw new JetDataLoss(where, "the stream or partition is gone");
          }
          continue;
        }
        if (info.hw < offset) {
          if (fail) {
            throw new JetDataLoss(where, "the high watermark " + info.hw
                + " is below the checkpointed offset " + offset
                + " (truncated, or the stream was recreated)");
          }
          out.get(s.getKey()).put(p.getKey(), offset);
        } else if (fail && offset < info.logStart && offset < info.hw) {
          throw new JetDataLoss(where, "offsets " + offset + ".." + (info.logStart - 1)
              + " were removed (retention) before the query read them");
        }
      }
    }
    return out;
  }

  /** Admission control by records (jetspark.offsets.limit_offsets). */
  static TreeMap<String, TreeMap<Integer, Long>> limit(
      JetOffsets start, TreeMap<String, TreeMap<Integer, Long>> latest, long max) {
    List<String[]> keys = new ArrayList<>();
    List<Long> avail = new ArrayList<>();
    long total = 0;
    for (Map.Entry<String, TreeMap<Integer, Long>> s : latest.entrySet()) {
      for (Map.Entry<Integer, Long> p : s.getValue().entrySet()) {
        long n = Math.max(0, p.getValue() - start.get(s.getKey(), p.getKey(), 0));
        keys.add(new String[] {s.getKey(), String.valueOf(p.getKey())});
        avail.add(n);
        total += n;
      }
    }
    if (total <= max) {
      return latest;
    }
    long[] take = new long[keys.size()];
    long left = max;
    for (int i = 0; i < take.length; i++) {
      take[i] = (long) (java.math.BigInteger.valueOf(avail.get(i))
          .multiply(java.math.BigInteger.valueOf(max))
          .divide(java.math.BigInteger.valueOf(total)).longValue());
      left -= take[i];
    }
    List<Integer> order = new ArrayList<>();
    for (int i = 0; i < take.length; i++) {
      order.add(i);
    }
    final long[] t = take;
    order.sort((a, b) -> {
      int c = Long.compare(avail.get(b) - t[b], avail.get(a) - t[a]);
      if (c != 0) {
        return c;
      }
      c = keys.get(a)[0].compareTo(keys.get(b)[0]);
      return c != 0 ? c
          : Integer.compare(Integer.parseInt(keys.get(a)[1]), Integer.parseInt(keys.get(b)[1]));
    });
    for (int i : order) {
      if (left <= 0) {
        break;
      }
      if (take[i] < avail.get(i)) {
        take[i]++;
        left--;
      }
    }
    TreeMap<String, TreeMap<Integer, Long>> out = new TreeMap<>();
    for (int i = 0; i < take.length; i++) {
      String stream = keys.get(i)[0];
      int part = Integer.parseInt(keys.get(i)[1]);
      out.computeIfAbsent(stream, k -> new TreeMap<>())
          .put(part, start.get(stream, part, 0) + take[i]);
    }
    return out;
  }

  /** {@code latest} capped at the AvailableNow {@code target} (the Python source's _cap). */
  static TreeMap<String, TreeMap<Integer, Long>> cap(TreeMap<String, TreeMap<Integer, Long>> latest,
      JetOffsets target, JetOffsets begin) {
    TreeMap<String, TreeMap<Integer, Long>> out = new TreeMap<>();
    for (Map.Entry<String, TreeMap<Integer, Long>> s : latest.entrySet()) {
      for (Map.Entry<Integer, Long> p : s.getValue().entrySet()) {
        long known = begin.get(s.getKey(), p.getKey(), -1);
        long cap = target.get(s.getKey(), p.getKey(), -1);
        if (cap < 0) {
          if (known >= 0) {
            out.computeIfAbsent(s.getKey(), k -> new TreeMap<>()).put(p.getKey(), known);
          }
          continue;
        }
        out.computeIfAbsent(s.getKey(), k -> new TreeMap<>())
            .put(p.getKey(), Math.max(Math.max(known, 0), Math.min(p.getValue(), cap)));
      }
    }
    return out;
  }

  /** The non-empty ranges from {@code start} to {@code end} (jetspark.offsets.plan_ranges). */
  static List<JetRange> ranges(JetOffsets start, JetOffsets end, int minPartitions) {
    List<JetRange> ranges = new ArrayList<>();
    long total = 0;
    for (Map.Entry<String, TreeMap<Integer, Long>> s : end.map.entrySet()) {
      for (Map.Entry<Integer, Long> p : s.getValue().entrySet()) {
        long known = start.get(s.getKey(), p.getKey(), -1);
        long begin = known < 0 ? 0 : known;
        if (p.getValue() > begin) {
          ranges.add(new JetRange(s.getKey(), p.getKey(), begin, p.getValue(), known < 0));
          total += p.getValue() - begin;
        }
      }
    }
    if (minPartitions == 0 || ranges.size() >= minPartitions) {
      return ranges;
    }
    List<JetRange> out = new ArrayList<>();
    for (JetRange r : ranges) {
      long size = r.end - r.start;
      long pieces = Math.max(1, Math.min(size, (long) Math.rint((double) size * minPartitions / total)));
      long step = size / pieces;
      long extra = size % pieces;
      long pos = r.start;
      for (long i = 0; i < pieces; i++) {
        long nxt = pos + step + (i < extra ? 1 : 0);
        out.add(new JetRange(r.stream, r.partition, pos, nxt, r.newPartition));
        pos = nxt;
      }
    }
    return out;
  }

  /**
   * The tasks reading {@code ranges}: one range each, or, with {@code group} and more ranges
   * than {@code slots} (and than {@code minPartitions}), that many tasks, the ranges dealt
   * largest first to the task with the fewest records so far (each task then reads its
   * ranges at once).
   */
  static InputPartition[] tasks(List<JetRange> ranges, boolean group, int slots, int minPartitions) {
    int count = Math.max(slots, minPartitions);
    if (!group || slots < 1 || ranges.size() <= count) {
      InputPartition[] out = new InputPartition[ranges.size()];
      for (int i = 0; i < out.length; i++) {
        out[i] = new JetRanges(new JetRange[] {ranges.get(i)});
      }
      return out;
    }
    List<JetRange> bySize = new ArrayList<>(ranges);
    bySize.sort((a, b) -> Long.compare(b.end - b.start, a.end - a.start));
    List<List<JetRange>> tasks = new ArrayList<>();
    long[] load = new long[count];
    for (int i = 0; i < count; i++) {
      tasks.add(new ArrayList<>());
    }
    for (JetRange r : bySize) {
      int least = 0;
      for (int i = 1; i < count; i++) {
        if (load[i] < load[least]) {
          least = i;
        }
      }
      tasks.get(least).add(r);
      load[least] += r.end - r.start;
    }
    InputPartition[] out = new InputPartition[count];
    for (int i = 0; i < count; i++) {
      out[i] = new JetRanges(tasks.get(i).toArray(new JetRange[0]));
    }
    return out;
  }

  /** Spark's default parallelism (its task slots in local mode), or 0 if there is no session. */
  static int slots() {
    try {
      return org.apache.spark.sql.SparkSession.active().sparkContext().defaultParallelism();
    } catch (RuntimeException e) {
      return 0;
    }
  }
}
