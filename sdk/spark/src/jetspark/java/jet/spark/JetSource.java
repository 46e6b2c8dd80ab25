package jet.spark;

import java.util.Collections;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Format {@code jetstream-jvm}: the jetstream source's batch and micro-batch reads in the
 * JVM (no Python worker), with the Python source's rows and offsets (spec/spark.md).
 */
public final class JetSource implements TableProvider, DataSourceRegister {
  /** The Python source's schema without headers (jetspark.schema). */
  static final StructType SCHEMA = new StructType()
      .add("key", DataTypes.BinaryType)
      .add("value", DataTypes.BinaryType)
      .add("stream", DataTypes.StringType)
      .add("subject", DataTypes.StringType)
      .add("partition", DataTypes.IntegerType)
      .add("offset", DataTypes.LongType)
      .add("timestamp", DataTypes.TimestampType);

  /** With option includeHeaders: the headers column last, as the Python source's. */
  static final StructType WITH_HEADERS = SCHEMA.add("headers", DataTypes.createArrayType(
      new StructType().add("key", DataTypes.StringType).add("value", DataTypes.BinaryType)));

  static StructType schema(Map<String, String> options) {
    return JetOptions.includeHeaders(options) ? WITH_HEADERS : SCHEMA;
  }

  @Override
  public String shortName() {
    return "jetstream-jvm";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return schema(options);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    return new JetTable(schema);
  }

  /** The stream(s) read, as a Spark table. */
  static final class JetTable implements Table, SupportsRead {
    private final StructType schema;

    JetTable(StructType schema) {
      this.schema = schema;
    }

    @Override
    public String name() {
      return "jetstream-jvm";
    }

    @Override
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return Collections.unmodifiableSet(
          EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ));
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new JetScan(options.asCaseSensitiveMap());
    }
  }
}
