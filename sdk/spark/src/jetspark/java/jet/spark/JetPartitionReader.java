package jet.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Arrays;
import java.util.zip.CRC32;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The records of one range, exactly [start, end) (jetspark._read.read_range): Fetch
 * answers from the partition's leader, one request ahead, each record's CRC checked and
 * its fields decoded from the answer's bytes (spec/storage.md, "Record").
 */
final class JetPartitionReader implements PartitionReader<InternalRow> {
  private static final int HEADER = 28;
  private static final int MAX_BODY = 83951616;
  private static final int ATTEMPTS = 6;

  private final JetOptions opts;
  private final JetRange range;
  private final JetClient client;
  private final UTF8String stream;
  private final Object[] values = new Object[7];
  private final GenericInternalRow row = new GenericInternalRow(values);
  private final CRC32 crc = new CRC32();
  private JetWire wire;
  private int pending = -1;
  private long pendingOffset;
  private int pendingMax;
  private long offset;
  private byte[] buf;
  private int pos;
  private int stop;
  private boolean done;

  JetPartitionReader(JetOptions opts, JetRange range) {
    this.opts = opts;
    this.range = range;
    this.client = new JetClient(opts.servers, opts.timeoutMs);
    this.stream = UTF8String.fromString(range.stream);
    this.offset = range.start;
    values[2] = stream;
    values[4] = range.partition;
  }

  @Override
  public boolean next() throws IOException {
    while (true) {
      if (pos < stop) {
        decode();
        return true;
      }
      if (done || offset >= range.end) {
        return false;
      }
      if (pending < 0) {
        send(offset, opts.fetchMaxBytes);
      }
      answer();
    }
  }

  private void send(long at, int maxBytes) throws IOException {
    for (int attempt = 0; ; attempt++) {
      try {
        if (wire == null) {
          wire = client.wire(client.leader(range.stream, range.partition));
        }
        pending = wire.send(JetWire.FETCH, JetWire.fetchBody(range.stream, range.partition, at, maxBytes));
        pendingOffset = at;
        pendingMax = maxBytes;
        return;
      } catch (IOException e) {
        retry(e, attempt);
      }
    }
  }

  private byte[] receive() throws IOException {
    for (int attempt = 0; ; attempt++) {
      try {
        int id = pending;
        pending = -1;
        // The buffer of the previous answer is reused: its rows were consumed (Spark copies
        // a row before it calls next() again).
        return wire.receive(JetWire.FETCH, id, buf);
      } catch (IOException e) {
        retry(e, attempt);
        send(pendingOffset, pendingMax);
      }
    }
  }

  /** After a failed request: a fresh connection to the leader as the metadata says now. */
  private void retry(IOException e, int attempt) throws IOException {
    if (attempt + 1 >= ATTEMPTS || (e instanceof JetServerError && !((JetServerError) e).retriable())) {
      throw e;
    }
    if (wire != null) {
      client.drop(wire.address);
      wire = null;
    }
    JetClient.pause(attempt);
    client.metadata();
  }

  /** Take the answer in flight; set up the records of [offset, end) it holds. */
  private void answer() throws IOException {
    byte[] body = receive();
    buf = body;
    pos = 0;
    stop = 0;
    int error = u16(body, 0);
    long hw = i64(body, 2);
    long logStart = i64(body, 10);
    long leo = i64(body, 18);
    int len = (int) u32(body, 26);
    if (30 + len != wire.length) {
      throw new IOException("jetstream-jvm: Fetch answer of " + wire.length + " bytes holds "
          + len + " record bytes, for " + where());
    }
    int base = 30;
    if (error == JetServerError.OFFSET_OUT_OF_RANGE) {
      if (offset < logStart) {
        long goneTo = Math.min(logStart, range.end);
        if (opts.failOnDataLoss && !range.newPartition) {
          throw new JetDataLoss(where(), "offsets " + offset + ".." + (goneTo - 1)
              + " were removed (retention) before the query read them");
        }
        offset = logStart;
        return;
      }
      truncated(leo);
      return;
    }
    if (error != 0) {
      throw new IOException("jetstream-jvm: Fetch error code " + error + " for " + where());
    }
    // The whole records with offsets below the end, CRC checked.
    int p = base;
    int end = base + len;
    long nxt = -1;
    int last = p;
    while (end - p >= HEADER) {
      long recOffset = i64(body, p);
      long length = u32(body, p + 20);
      if (length > MAX_BODY) {
        throw new IOException("jetstream-jvm: record length " + length + " over limit in " + where());
      }
      int size = HEADER + (int) length;
      if (end - p < size) {
        if (nxt < 0 && p == base && size > pendingMax) {
          // Only a partial record came: ask again for at least its size.
          send(offset, Math.max(opts.fetchMaxBytes, size));
          return;
        }
        break;
      }
      nxt = recOffset + 1;
      if (recOffset >= range.end) {
        break;
      }
      crc.reset();
      crc.update(body, p, 24);
      crc.update(body, p + HEADER, (int) length);
      if ((int) crc.getValue() != (int) u32(body, p + 24)) {
        throw new IOException("jetstream-jvm: record CRC mismatch at offset " + recOffset + " of " + where());
      }
      p += size;
      last = p;
    }
    if (nxt < 0) {
      if (hw <= offset) {
        truncated(hw);
      }
      done = true; // nothing came back below the high watermark: a compaction gap reaching it
      return;
    }
    offset = nxt;
    if (nxt < range.end) {
      send(nxt, opts.fetchMaxBytes);
    }
    pos = base;
    stop = last;
  }

  /** The record at {@code pos} into the row; {@code pos} moves past it. */
  private void decode() throws IOException {
    byte[] b = buf;
    int p = pos;
    int recEnd = p + HEADER + (int) u32(b, p + 20);
    long recOffset = i64(b, p);
    long ts = i64(b, p + 8);
    int q = p + HEADER;
    int attrs = b[q] & 0xff;
    if ((attrs & ~1) != 0) {
      throw new IOException("jetstream-jvm: unknown record attributes at offset " + recOffset);
    }
    q += 1 + ((attrs & 1) != 0 ? 16 : 0);
    int klen = i32(b, q);
    q += 4;
    if (klen < -1 || q + Math.max(klen, 0) > recEnd) {
      throw new IOException("jetstream-jvm: bad key length at offset " + recOffset);
    }
    values[0] = klen < 0 ? null : Arrays.copyOfRange(b, q, q + klen);
    q += Math.max(klen, 0);
    int slen = u16(b, q);
    values[3] = UTF8String.fromBytes(b, q + 2, slen);
    q += 2 + slen;
    q += 2 + u16(b, q); // reply
    int hcount = u16(b, q);
    q += 2;
    for (int h = 0; h < hcount; h++) {
      q += 2 + u16(b, q);
      q += 4 + (int) u32(b, q);
    }
    int vlen = (int) u32(b, q);
    q += 4;
    if (q + vlen != recEnd) {
      throw new IOException("jetstream-jvm: record body length mismatch at offset " + recOffset);
    }
    values[1] = Arrays.copyOfRange(b, q, q + vlen);
    values[5] = recOffset;
    values[6] = Math.floorDiv(ts, 1000L);
    pos = recEnd;
  }

  private void truncated(long logEnd) {
    String message = "the log ends at offset " + logEnd + ", below offset " + offset
        + " the query reads up to " + range.end + " (truncated, or the stream was recreated)";
    if (opts.failOnDataLoss) {
      throw new JetDataLoss(where(), message);
    }
    done = true;
  }

  private String where() {
    return range.stream + "/" + range.partition;
  }

  @Override
  public InternalRow get() {
    return row;
  }

  @Override
  public void close() {
    client.close();
  }

  private static int u16(byte[] b, int p) {
    return ((b[p] & 0xff) << 8) | (b[p + 1] & 0xff);
  }

  private static int i32(byte[] b, int p) {
    return ((b[p] & 0xff) << 24) | ((b[p + 1] & 0xff) << 16) | ((b[p + 2] & 0xff) << 8) | (b[p + 3] & 0xff);
  }

  private static long u32(byte[] b, int p) {
    return i32(b, p) & 0xffffffffL;
  }

  private static long i64(byte[] b, int p) {
    return ((long) i32(b, p) << 32) | u32(b, p + 4);
  }
}
