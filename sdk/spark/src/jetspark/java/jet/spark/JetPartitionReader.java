package jet.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The records of one task's ranges, each exactly [start, end) (jetspark._read.read_range).
 * The ranges of one leader are read at once on one connection: a FetchStream each (one
 * request, the server pushes its answers while the task turns the previous one into rows),
 * or a Fetch each, the next sent before the answer's rows are taken, where the server has
 * no FetchStream or option fetchStream is false. Rows come in the order the answers arrive
 * (each range's in offset order). Each record's CRC is checked and its fields decoded from
 * the answer's bytes (spec/storage.md, "Record").
 */
final class JetPartitionReader implements PartitionReader<InternalRow> {
  static final int HEADER = 28;
  static final int MAX_BODY = 83951616;
  private static final int ATTEMPTS = 6;
  private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger("jet.spark");

  /** One range's progress. */
  private static final class Cursor {
    final JetRange range;
    final UTF8String stream;
    long offset;
    boolean done;
    /** The correlation id of its request in flight, or -1. */
    int request = -1;
    boolean cancelled;
    int maxBytes;

    Cursor(JetRange range, int maxBytes) {
      this.range = range;
      this.stream = UTF8String.fromString(range.stream);
      this.offset = range.start;
      this.maxBytes = maxBytes;
    }

    String where() {
      return range.stream + "/" + range.partition;
    }
  }

  private final JetOptions opts;
  private final JetClient client;
  private final Cursor[] cursors;
  private final Map<Integer, Cursor> inFlight = new HashMap<>();
  private final Object[] values;
  private final GenericInternalRow row;
  /** The previous row's key and value arrays, reused for the next of the same length. */
  private byte[] lastKey;
  private byte[] lastValue;
  private JetWire wire;
  /** The answers of {@link #wire}, read ahead of the rows (option readAhead). */
  private JetAhead ahead;
  private byte[] buf;
  private int pos;
  private int stop;
  private int failures;
  // Where a task's time goes, logged at DEBUG when it closes (logger jet.spark): waiting for
  // and reading answers, checking their records, building rows, and the rest (Spark's).
  private final long opened = System.nanoTime();
  private long frameNs;
  private long checkNs;
  private long rowNs;
  private long rows;
  private long answers;

  JetPartitionReader(JetOptions opts, JetRange[] ranges) {
    this.opts = opts;
    this.client = new JetClient(opts);
    this.values = new Object[opts.includeHeaders ? 8 : 7];
    this.row = new GenericInternalRow(values);
    this.cursors = new Cursor[ranges.length];
    for (int i = 0; i < ranges.length; i++) {
      cursors[i] = new Cursor(ranges[i], opts.fetchMaxBytes);
      cursors[i].done = ranges[i].start >= ranges[i].end;
    }
  }

  @Override
  public boolean next() throws IOException {
    while (pos >= stop) {
      if (!step()) {
        return false;
      }
    }
    long t = System.nanoTime();
    decode();
    rowNs += System.nanoTime() - t;
    rows++;
    return true;
  }

  /** Take one answer (sending requests first where none is in flight); false when all is read. */
  private boolean step() throws IOException {
    while (true) {
      try {
        if (wire == null && !open()) {
          return false;
        }
        if (inFlight.isEmpty()) {
          stopAhead();
          wire = null; // this leader's ranges are read; the connection stays in the client
          continue;
        }
        // The previous answer's rows were consumed (Spark copies a row before it calls
        // next() again): its buffer goes back for the answers read ahead.
        long t0 = System.nanoTime();
        JetAhead.Frame frame = ahead.take();
        buf = frame.body;
        long t1 = System.nanoTime();
        answer(frame);
        failures = 0; // not before: an answer that fails its checks each time ends the retries
        frameNs += t1 - t0;
        checkNs += System.nanoTime() - t1;
        answers++;
        return true;
      } catch (IOException e) {
        retry(e);
      }
    }
  }

  /** Requests for every unfinished range the leader of the first one leads; false if none. */
  private boolean open() throws IOException {
    String leader = null;
    for (Cursor c : cursors) {
      if (!c.done) {
        leader = client.leader(c.range.stream, c.range.partition);
        break;
      }
    }
    if (leader == null) {
      return false;
    }
    wire = client.wire(leader);
    ahead = new JetAhead(wire, opts.timeoutMs, opts.readAhead, opts.fetchMaxBytes);
    for (Cursor c : cursors) {
      if (!c.done && leader.equals(client.leader(c.range.stream, c.range.partition))) {
        request(c);
      }
    }
    return true;
  }

  private void request(Cursor c) throws IOException {
    JetRange r = c.range;
    int id;
    if (opts.fetchStream && wire.serves(JetWire.FETCH_STREAM)) {
      id = ahead.send(JetWire.FETCH_STREAM, JetWire.fetchStreamBody(r.stream, r.partition,
          c.offset, c.maxBytes, 0, JetWire.MAX_STREAM_RESPONSES));
    } else {
      id = ahead.send(JetWire.FETCH, JetWire.fetchBody(r.stream, r.partition, c.offset, c.maxBytes));
    }
    c.request = id;
    c.cancelled = false;
    inFlight.put(id, c);
  }

  /** After a failed request: fresh connections, the metadata as it is now, the requests again. */
  private void retry(IOException e) throws IOException {
    if (++failures >= ATTEMPTS
        || (e instanceof JetServerError && !((JetServerError) e).retriable())) {
      throw e;
    }
    stopAhead();
    client.close();
    wire = null;
    inFlight.clear();
    pos = stop = 0;
    for (Cursor c : cursors) {
      c.request = -1;
    }
    JetClient.pause(failures - 1);
    client.metadata();
  }

  /** The frame just received: set up the records of its range's [offset, end) it holds. */
  private void answer(JetAhead.Frame f) throws IOException {
    pos = stop = 0;
    if (f.api == JetWire.CANCEL_FETCH_STREAM) {
      return; // the answer to a cancel: the stream's last response says it ended
    }
    Cursor c = inFlight.get(f.id);
    if (c == null || (f.api != JetWire.FETCH && f.api != JetWire.FETCH_STREAM)) {
      throw new IOException("jetstream-jvm: unexpected answer api " + f.api + " id "
          + f.id + " from " + wire.address);
    }
    if (!f.more()) {
      inFlight.remove(f.id);
      c.request = -1;
    }
    if (!c.done) {
      records(c, f);
    }
    if (c.done && c.request >= 0 && !c.cancelled) {
      // Its stream would go on past the range's end: end it (the last response then comes).
      c.cancelled = true;
      if (wire.serves(JetWire.CANCEL_FETCH_STREAM)) {
        ahead.send(JetWire.CANCEL_FETCH_STREAM, JetWire.cancelBody(c.request));
      }
    }
    if (!c.done && c.request < 0) {
      request(c); // sent before this answer's rows are taken
    }
    values[2] = c.stream;
    values[4] = c.range.partition;
  }

  /**
   * The records of Fetch answer {@code f} below the range's end become rows; their CRCs were
   * checked where the answer was read ({@link JetAhead#firstBad}).
   */
  private void records(Cursor c, JetAhead.Frame f) throws IOException {
    byte[] body = f.body;
    int bodyLength = f.length;
    int error = u16(body, 0);
    long hw = i64(body, 2);
    long logStart = i64(body, 10);
    long leo = i64(body, 18);
    int len = (int) u32(body, 26);
    if (30 + len != bodyLength) {
      throw new IOException("jetstream-jvm: Fetch answer of " + bodyLength + " bytes holds "
          + len + " record bytes, for " + c.where());
    }
    if (error == JetServerError.OFFSET_OUT_OF_RANGE) {
      if (c.offset < logStart) {
        long goneTo = Math.min(logStart, c.range.end);
        if (opts.failOnDataLoss && !c.range.newPartition) {
          throw new JetDataLoss(c.where(), "offsets " + c.offset + ".." + (goneTo - 1)
              + " were removed (retention) before the query read them");
        }
        c.offset = logStart;
        c.done = c.offset >= c.range.end;
        return;
      }
      truncated(c, leo);
      return;
    }
    if (error != 0) {
      throw new IOException("jetstream-jvm: Fetch error code " + error + " for " + c.where());
    }
    if (f.bad >= 0 && f.bad < c.range.end) {
      throw new IOException("jetstream-jvm: record CRC mismatch at offset " + f.bad + " of " + c.where());
    }
    // The whole records with offsets below the end, CRC checked.
    int base = 30;
    int p = base;
    int end = base + len;
    long nxt = -1;
    int last = p;
    boolean partial = false;
    while (end - p >= HEADER) {
      long recOffset = i64(body, p);
      long length = u32(body, p + 20);
      if (length > MAX_BODY) {
        throw new IOException("jetstream-jvm: record length " + length + " over limit in " + c.where());
      }
      int size = HEADER + (int) length;
      if (end - p < size) {
        if (nxt < 0 && p == base && size > c.maxBytes) {
          c.maxBytes = Math.max(opts.fetchMaxBytes, size); // only a partial record came
          partial = true;
        }
        break;
      }
      nxt = recOffset + 1;
      if (recOffset >= c.range.end) {
        break;
      }
      p += size;
      last = p;
    }
    if (nxt < 0) {
      if (partial && c.request < 0) {
        return; // asked again (answer()) for the whole record
      }
      if (hw <= c.offset) {
        truncated(c, hw);
      }
      c.done = true; // nothing came back below the high watermark: a compaction gap reaching it
      return;
    }
    c.offset = nxt;
    c.done = nxt >= c.range.end;
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
    values[0] = klen < 0 ? null : (lastKey = copy(lastKey, b, q, klen));
    q += Math.max(klen, 0);
    int slen = u16(b, q);
    values[3] = UTF8String.fromBytes(b, q + 2, slen);
    q += 2 + slen;
    q += 2 + u16(b, q); // reply
    int hcount = u16(b, q);
    q += 2;
    Object[] headers = opts.includeHeaders ? new Object[hcount] : null;
    for (int h = 0; h < hcount; h++) {
      int hk = u16(b, q);
      long hv = q + 6 + hk > recEnd ? -1 : u32(b, q + 2 + hk);
      if (hv < 0 || q + 6 + hk + hv > recEnd) {
        throw new IOException("jetstream-jvm: bad header length at offset " + recOffset);
      }
      if (headers != null) {
        headers[h] = new GenericInternalRow(new Object[] {UTF8String.fromBytes(b, q + 2, hk),
            Arrays.copyOfRange(b, q + 6 + hk, q + 6 + hk + (int) hv)});
      }
      q += 6 + hk + (int) hv;
    }
    if (headers != null) {
      values[7] = new GenericArrayData(headers);
    }
    int vlen = (int) u32(b, q);
    q += 4;
    if (q + vlen != recEnd) {
      throw new IOException("jetstream-jvm: record body length mismatch at offset " + recOffset);
    }
    values[1] = lastValue = copy(lastValue, b, q, vlen);
    values[5] = recOffset;
    values[6] = Math.floorDiv(ts, 1000L);
    pos = recEnd;
  }

  /**
   * {@code len} bytes of {@code b} from {@code from}: in {@code last} (the previous row's
   * array) when it has that length, else in a new array. Spark turns each row into its
   * UnsafeRow (the plan's Project) before it calls {@link #next} again, as it does with the
   * subject's bytes, which point into the answer's buffer; a new 16 KiB array a row was
   * the most of what the collector had to do (bench_spark.py, session 27).
   */
  private static byte[] copy(byte[] last, byte[] b, int from, int len) {
    if (last != null && last.length == len) {
      System.arraycopy(b, from, last, 0, len);
      return last;
    }
    return Arrays.copyOfRange(b, from, from + len);
  }

  private void truncated(Cursor c, long logEnd) {
    String message = "the log ends at offset " + logEnd + ", below offset " + c.offset
        + " the query reads up to " + c.range.end + " (truncated, or the stream was recreated)";
    if (opts.failOnDataLoss) {
      throw new JetDataLoss(c.where(), message);
    }
    c.done = true;
  }

  @Override
  public InternalRow get() {
    return row;
  }

  private void stopAhead() {
    if (ahead != null) {
      ahead.close();
      ahead = null;
    }
  }

  @Override
  public void close() {
    stopAhead();
    client.close();
    if (LOG.isDebugEnabled()) {
      long total = System.nanoTime() - opened;
      LOG.debug(String.format("jetstream-jvm task: %d range(s), %d rows, %d answers in %.1f ms:"
          + " answers %.1f ms, checks %.1f ms, rows %.1f ms, rest %.1f ms", cursors.length, rows,
          answers, total / 1e6, frameNs / 1e6, checkNs / 1e6, rowNs / 1e6,
          (total - frameNs - checkNs - rowNs) / 1e6));
    }
  }

  private static int u16(byte[] b, int p) {
    return ((b[p] & 0xff) << 8) | (b[p + 1] & 0xff);
  }

  static int i32(byte[] b, int p) {
    return ((b[p] & 0xff) << 24) | ((b[p + 1] & 0xff) << 16) | ((b[p + 2] & 0xff) << 8) | (b[p + 3] & 0xff);
  }

  static long u32(byte[] b, int p) {
    return i32(b, p) & 0xffffffffL;
  }

  private static long i64(byte[] b, int p) {
    return ((long) i32(b, p) << 32) | u32(b, p + 4);
  }
}
