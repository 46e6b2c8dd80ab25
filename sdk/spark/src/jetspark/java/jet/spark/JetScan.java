package jet.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;

/** A read of the jetstream-jvm format: a batch (spark.read) or a micro-batch stream. */
final class JetScan implements ScanBuilder, Scan, Batch {
  private final Map<String, String> raw;

  JetScan(Map<String, String> raw) {
    this.raw = raw;
  }

  @Override
  public Scan build() {
    return this;
  }

  @Override
  public StructType readSchema() {
    return JetSource.schema(raw);
  }

  @Override
  public String description() {
    return "jetstream-jvm " + raw.getOrDefault("streams", "");
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return new JetStream(new JetOptions(raw, true));
  }

  /** The ranges from startingOffsets to endingOffsets, as they are now. */
  @Override
  public InputPartition[] planInputPartitions() {
    JetOptions opts = new JetOptions(raw, false);
    try (JetClient client = new JetClient(opts)) {
      Map<String, TreeMap<Integer, JetClient.Info>> snap = client.snapshot(opts.streams, true);
      JetOffsets start = new JetOffsets(JetPlan.resolve(opts.starting, "startingOffsets", snap));
      JetOffsets end = new JetOffsets(JetPlan.resolve(opts.ending, "endingOffsets", snap));
      for (Map.Entry<String, TreeMap<Integer, Long>> s : start.map.entrySet()) {
        for (Map.Entry<Integer, Long> p : s.getValue().entrySet()) {
          String where = s.getKey() + "/" + p.getKey();
          long stop = end.get(s.getKey(), p.getKey(), 0);
          if (p.getValue() > stop) {
            throw new IllegalArgumentException("jetstream-jvm option startingOffsets: " + where
                + " starts at " + p.getValue() + ", after its end " + stop);
          }
          long logStart = snap.get(s.getKey()).get(p.getKey()).logStart;
          if (opts.failOnDataLoss && p.getValue() < logStart) {
            throw new JetDataLoss(where, "offset " + p.getValue()
                + " was asked for but the log starts at " + logStart);
          }
        }
      }
      List<JetRange> ranges = JetPlan.ranges(start, end, opts.minPartitions);
      return JetPlan.tasks(ranges, opts.groupPartitions, JetPlan.slots(), opts.minPartitions);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new JetReaderFactory(new JetOptions(raw, false));
  }
}
