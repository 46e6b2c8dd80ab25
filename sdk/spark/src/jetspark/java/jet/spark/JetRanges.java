package jet.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** The ranges one task reads (one Spark partition): one, or several when they outnumber the task slots. */
final class JetRanges implements InputPartition {
  private static final long serialVersionUID = 1L;

  final JetRange[] ranges;

  JetRanges(JetRange[] ranges) {
    this.ranges = ranges;
  }
}
