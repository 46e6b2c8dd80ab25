package jet.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Map;
import java.util.TreeMap;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;

/**
 * The micro-batch side of jetstream-jvm (the driver): offsets as the Python source's
 * JetStreamReader computes them (initial, latest with maxRecordsPerTrigger, AvailableNow),
 * so either reader continues the other's checkpoint.
 */
final class JetStream implements MicroBatchStream, SupportsTriggerAvailableNow {
  private final JetOptions opts;
  private JetClient client;
  private JetOffsets target;
  private JetOffsets latestSeen;

  JetStream(JetOptions opts) {
    this.opts = opts;
  }

  private JetClient client() {
    if (client == null) {
      client = new JetClient(opts);
    }
    return client;
  }

  private Map<String, TreeMap<Integer, JetClient.Info>> snapshot(boolean require) {
    try {
      return client().snapshot(opts.streams, require);
    } catch (IOException e) {
      client.close();
      client = null;
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public Offset initialOffset() {
    return new JetOffsets(JetPlan.resolve(opts.starting, "startingOffsets", snapshot(true)));
  }

  @Override
  public Offset deserializeOffset(String json) {
    return JetOffsets.parse(json);
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return opts.maxRecordsPerTrigger > 0
        ? ReadLimit.maxRows(opts.maxRecordsPerTrigger)
        : ReadLimit.allAvailable();
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    target = new JetOffsets(JetPlan.latest(snapshot(false), new JetOffsets(new TreeMap<>()),
        opts.failOnDataLoss));
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("jetstream-jvm: latestOffset(start, limit) is used");
  }

  @Override
  public Offset latestOffset(Offset startOffset, ReadLimit limit) {
    JetOffsets begin = (JetOffsets) startOffset;
    Map<String, TreeMap<Integer, JetClient.Info>> snap = snapshot(false);
    TreeMap<String, TreeMap<Integer, Long>> latest = JetPlan.latest(snap, begin, opts.failOnDataLoss);
    latestSeen = new JetOffsets(latest);
    if (target != null) {
      latest = JetPlan.cap(latest, target, begin);
    }
    if (limit instanceof ReadMaxRows) {
      // New partitions count from their log start (as the Python source's latestOffset).
      TreeMap<String, TreeMap<Integer, Long>> base = new TreeMap<>();
      for (Map.Entry<String, TreeMap<Integer, Long>> s : begin.map.entrySet()) {
        base.put(s.getKey(), new TreeMap<>(s.getValue()));
      }
      for (Map.Entry<String, TreeMap<Integer, JetClient.Info>> s : snap.entrySet()) {
        for (Map.Entry<Integer, JetClient.Info> p : s.getValue().entrySet()) {
          base.computeIfAbsent(s.getKey(), k -> new TreeMap<>())
              .putIfAbsent(p.getKey(), p.getValue().logStart);
        }
      }
      long rows = ((ReadMaxRows) limit).maxRows();
      if (opts.maxRecordsPerTrigger > 0) {
        rows = Math.min(rows, opts.maxRecordsPerTrigger);
      }
      latest = JetPlan.limit(new JetOffsets(base), latest, rows);
    }
    return new JetOffsets(latest);
  }

  @Override
  public Offset reportLatestOffset() {
    return latestSeen;
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    return JetPlan.tasks(JetPlan.ranges((JetOffsets) start, (JetOffsets) end, opts.minPartitions),
        opts.groupPartitions, JetPlan.slots(), opts.minPartitions);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new JetReaderFactory(opts);
  }

  @Override
  public void commit(Offset end) {}

  @Override
  public void stop() {
    if (client != null) {
      client.close();
      client = null;
    }
  }
}
