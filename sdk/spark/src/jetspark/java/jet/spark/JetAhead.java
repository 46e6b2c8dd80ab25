package jet.spark;

import java.io.Closeable;
import java.io.IOException;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.zip.CRC32;

/**
 * The answers of one connection, read on a thread of its own while the task turns the
 * previous answer into rows (option readAhead, the default): at most {@link #AHEAD} frames
 * are read ahead of the one the task holds (each frame's bytes in one of {@link #AHEAD} + 1
 * buffers, reused). The thread reads only while a request sent through {@link #send} has
 * not had its last frame (one without the "more" flag); it stops at the first error, which
 * the task gets from {@link #take} in its turn. Without readAhead, {@link #take} reads the
 * next frame on the task's thread (into the buffer of the one before). Whoever reads a Fetch
 * answer also checks its records' CRCs ({@link Frame#bad}): with readAhead, off the task's
 * thread.
 */
final class JetAhead implements Closeable {
  /** Frames read ahead of the one the task holds (issue 39: 16 KiB values, bench_spark.py). */
  static final int AHEAD = 2;
  /**
   * Answer buffers kept for the executor's next tasks (at most this many), not a new set of
   * 8 MiB buffers each task: reading ahead with new buffers each task took the JVM 1.75
   * CPU-s a query against 1.21 without, kept 1.01 against 1.14 (bench_spark.py, session 26).
   */
  static final int KEPT = 4 * (AHEAD + 1);

  private static final java.util.concurrent.ConcurrentLinkedQueue<byte[]> KEEP =
      new java.util.concurrent.ConcurrentLinkedQueue<>();
  private static final java.util.concurrent.atomic.AtomicInteger KEPT_NOW =
      new java.util.concurrent.atomic.AtomicInteger();
  /** The largest answer read in this JVM: the least a new buffer holds (up to a bound). */
  private static final java.util.concurrent.atomic.AtomicInteger LARGEST =
      new java.util.concurrent.atomic.AtomicInteger();
  /** Room above fetchMaxBytes for an answer's header and a record that ends past it. */
  private static final int SLACK = 1 << 20;

  /** One frame as received: its header fields and body, or the error that ended reading. */
  static final class Frame {
    int api;
    int flags;
    int id;
    int length;
    byte[] body;
    IOException error;
    /** The offset of the first whole record whose CRC does not match, or -1. */
    long bad = -1;

    /** True if more answers to its request follow (FetchStream). */
    boolean more() {
      return (flags & 0x04) != 0;
    }
  }

  private final JetWire wire;
  private final long timeoutMs;
  private final int atMost;
  private final CRC32 crc = new CRC32();
  private final BlockingQueue<Frame> ready = new LinkedBlockingQueue<>();
  private final BlockingQueue<byte[]> spare = new ArrayBlockingQueue<>(AHEAD + 1);
  private final Thread thread;
  private Frame held;
  /** Requests sent whose last frame was not read yet (guarded by this). */
  private int outstanding;
  private boolean closed;

  JetAhead(JetWire wire, long timeoutMs, boolean ahead, int fetchMaxBytes) {
    this.wire = wire;
    this.timeoutMs = timeoutMs;
    this.atMost = fetchMaxBytes > Integer.MAX_VALUE - SLACK ? fetchMaxBytes : fetchMaxBytes + SLACK;
    for (int i = 0; i <= AHEAD; i++) {
      byte[] kept = KEEP.poll();
      if (kept != null) {
        KEPT_NOW.decrementAndGet();
      }
      spare.add(kept != null ? kept : new byte[0]);
    }
    if (ahead) {
      thread = new Thread(this::run, "jetstream-jvm ahead " + wire.address);
      thread.setDaemon(true);
      thread.start();
    } else {
      thread = null;
    }
  }

  /** Send a request whose answers this reads. */
  int send(int api, byte[] body) throws IOException {
    synchronized (this) {
      outstanding++;
      notifyAll();
    }
    return wire.send(api, body);
  }

  /**
   * The next frame (the one taken before it gives its buffer back: its rows were
   * consumed). Its error if reading failed.
   */
  Frame take() throws IOException {
    if (held != null) {
      spare.add(held.body);
      held = null;
    }
    if (thread == null) {
      held = read(spare.remove()); // an error frame is thrown: the task retries afresh
      return held;
    }
    Frame f;
    try {
      // The thread's socket read is bounded by the request timeout; this bounds the rest.
      f = ready.poll(2 * timeoutMs + 1000, TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("jetstream-jvm: interrupted waiting for an answer", e);
    }
    if (f == null) {
      throw new IOException("jetstream-jvm: no answer from " + wire.address + " within "
          + (2 * timeoutMs + 1000) + " ms");
    }
    if (f.error != null) {
      throw f.error;
    }
    held = f;
    return f;
  }

  private void run() {
    try {
      while (true) {
        synchronized (this) {
          while (outstanding == 0 && !closed) {
            wait();
          }
          if (closed) {
            return;
          }
        }
        byte[] buf = spare.take();
        Frame f;
        try {
          f = read(buf);
        } catch (IOException e) {
          f = new Frame();
          f.error = e;
          ready.add(f);
          return;
        }
        if (!f.more()) {
          synchronized (this) {
            outstanding--;
          }
        }
        ready.add(f);
      }
    } catch (InterruptedException e) {
      // closed
    }
  }

  /**
   * The next frame, read into {@code buf} if it is large enough, else into a new buffer as
   * large as the largest answer yet (up to fetchMaxBytes and some room): answers vary a
   * little in size, and each new 8 MiB buffer is garbage for the collector to copy
   * (bench_spark.py, session 27). A Fetch answer's records are checked.
   */
  private Frame read(byte[] buf) throws IOException {
    Frame f = new Frame();
    f.body = wire.frame(buf, Math.min(LARGEST.get(), atMost));
    f.api = wire.gotApi;
    f.flags = wire.gotFlags;
    f.id = wire.gotId;
    f.length = wire.length;
    LARGEST.accumulateAndGet(f.length, Math::max);
    if (f.api == JetWire.FETCH || f.api == JetWire.FETCH_STREAM) {
      f.bad = firstBad(f.body, f.length, crc);
    }
    return f;
  }

  /**
   * The offset of the first whole record of Fetch answer {@code body} whose CRC does not
   * match (spec/storage.md, "Record"), or -1; an answer with an error code or a record
   * length over the limit is left to the reader, which refuses it.
   */
  static long firstBad(byte[] body, int bodyLength, CRC32 crc) {
    if (bodyLength < 30 || ((body[0] | body[1]) != 0)) {
      return -1;
    }
    long records = JetPartitionReader.u32(body, 26);
    int end = (int) Math.min(bodyLength, 30 + records);
    int p = 30;
    while (end - p >= JetPartitionReader.HEADER) {
      long length = JetPartitionReader.u32(body, p + 20);
      if (length > JetPartitionReader.MAX_BODY || end - p < JetPartitionReader.HEADER + length) {
        return -1;
      }
      crc.reset();
      crc.update(body, p, 24);
      crc.update(body, p + JetPartitionReader.HEADER, (int) length);
      if ((int) crc.getValue() != (int) JetPartitionReader.u32(body, p + 24)) {
        return (JetPartitionReader.u32(body, p) << 32) | JetPartitionReader.u32(body, p + 4);
      }
      p += JetPartitionReader.HEADER + (int) length;
    }
    return -1;
  }

  /** Stop reading (the thread ends; a read under way ends with the socket or its timeout). */
  @Override
  public void close() {
    synchronized (this) {
      closed = true;
      notifyAll();
    }
    if (thread != null) {
      thread.interrupt();
    }
    if (held != null) {
      keep(held.body);
      held = null;
    }
    for (byte[] b = spare.poll(); b != null; b = spare.poll()) {
      keep(b);
    }
  }

  private static void keep(byte[] b) {
    if (b.length > 0 && KEPT_NOW.incrementAndGet() <= KEPT) {
      KEEP.add(b);
    } else if (b.length > 0) {
      KEPT_NOW.decrementAndGet();
    }
  }
}
