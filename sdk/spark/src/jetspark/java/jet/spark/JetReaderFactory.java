package jet.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

/** Makes the executors' readers (serialized to them with the options). */
final class JetReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  private final JetOptions opts;

  JetReaderFactory(JetOptions opts) {
    this.opts = opts;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    return new JetPartitionReader(opts, ((JetRanges) partition).ranges);
  }
}
