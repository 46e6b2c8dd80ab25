package jet.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** Offsets [start, end) of one stream partition: one Spark partition (jetspark.offsets.OffsetRange). */
final class JetRange implements InputPartition {
  private static final long serialVersionUID = 1L;

  final String stream;
  final int partition;
  final long start;
  final long end;
  /** A partition that appeared after the query started: records gone before are not loss. */
  final boolean newPartition;

  JetRange(String stream, int partition, long start, long end, boolean newPartition) {
    this.stream = stream;
    this.partition = partition;
    this.start = start;
    this.end = end;
    this.newPartition = newPartition;
  }
}
