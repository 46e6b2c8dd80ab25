"""Spark integration throughput: jetspark vs using jetsdk directly (issue 13's targets).

Source: a streaming query (``jetstream`` source, Trigger.AvailableNow, a trivial
foreachBatch that counts) over a stream of N records, against a jetsdk Consumer reading the
same records. Sinks: ``foreach_batch_sink`` and ``df.write.format("jetstream")`` writing N
rows (ack ALL), against a jetsdk Producer sending N messages (ack ALL). Table read: the same
N records in a compacted stream of 1,000 keys read with ``option("table", ...)`` and
counted, against a jetsdk ``Table`` opening on it (rates count the N records written;
compaction may have removed some of them meanwhile, for both readers alike). Spark's start-up is
not counted; a streaming query's own start-up is shown apart ("wall" vs "in batches"); the
source and each sink have one untimed warm-up call per value size.

Every rate is the median of the rounds, printed with its ratio to the jetsdk baseline and
the issue's target; a round runs the baseline and then the Spark paths, so the machine's
load changes weigh on both sides of a ratio. Under the source's rates and each sink's, the
CPU seconds (median) the JVM and the Python processes it started spent on one query or call
(from /proc, so they survive the machine's load), the Python ones in two parts: Spark's
Python workers (the tasks' reads and writes, the per-row part) and its other Python
processes (the streaming source's runner, which each query starts, and the planners: a
per-query cost, not divided by rows). Then the fixed cost of an empty and of a 1-row batch
(ms, median of calls), the jetspark code paths without Spark at 16 KiB
(:mod:`bench.spark_paths`: CPU per row of the source's read and of a sink task's write
against the jetsdk Consumer and Producer), and the rates at 1 KB and 16 KiB values.

    python -m bench spark [--quick]

``JET_BENCH_SPARK_PARTS`` (default ``100,fixed,1000,paths,16384``) limits the run to some
of its parts (e.g. ``16384``: the 16 KiB rates only; ``paths``: the code paths without
Spark; ``floor``, not in the default: Spark's own streaming sources at 16 KiB against the
Consumer, :mod:`bench.bench_spark_floor`); ``JET_BENCH_SPARK_LARGE_ROUNDS`` sets the
rounds at 16 KiB (:data:`LARGE_ROUNDS`).

Where the JVM's CPU goes at 16 KiB (issue 39; JFR and per-thread /proc counts, local[2],
C1 only, load 7-10): a query over 10,000 rows took 1.05-1.19 s of JVM CPU and one over 100
rows 0.41-0.60 s, so about half is per query (the stream execution thread's planning and
checkpoint, the C1 compiler, a forked chmod). Per row (~30 us at 16 KiB) the executor tasks
copy each value three times: Arrow's VarBinaryVector.getObject (a new byte[] a value, via
ArrowColumnVector.getBinary), the UnsafeRow write, and UnsafeRow.getBinary in the count's
codegen stage (a Python data source cannot prune columns, so even a count reads every value).
With C2 (the JVM's default tiers) the executor tasks fell 0.35 -> 0.21 s over three queries
while the compiler took 0.6-0.9 s a query: more JVM CPU for a bench of a few queries.

Where the Python processes' CPU goes at 16 KiB (2026-11-29, py-spy on the JVM's Python
processes, 10,000 rows, load 10-17): the executor's read itself (Fetch, CRC, the Arrow
batch with one copy of each value, Arrow IPC to the JVM) took 0.26-0.29 CPU-s a query
outside Spark, as much as the jetsdk Consumer's 0.27-0.37 s; but each query also starts a
``python_streaming_source_runner`` process that imports pyspark from
``$SPARK_HOME/python/lib/pyspark.zip`` (zipimport compiles every module from source: 1.66
CPU-s against 0.5 from site-packages) and whose ``importlib.invalidate_caches()`` re-reads
that zip's directory once for each of its 14 package importers (0.14 s). That is Spark's,
before the query's first batch: it weighs on "wall incl. query start", not "in batches".
Inside the batch, foreachBatch's DataFrame is a ``Scan ExistingRDD`` of the batch's rows
(Spark's ForeachBatchSink), so its count projects every column of every row.

Where the 16 KiB gap is (issue 39, 2026-11-30, load 20-37, so absolute figures are slow):
the source's jetspark code is at par with jetsdk. Without Spark (part ``paths``, two runs),
the source's ``read()`` took 20.6 and 28.1 CPU us/row against the Consumer's 23.5 and 34.4
(Fetch and the SDK's receive about 19, the CRC 2-3, the Arrow batch 6-9: one copy of each
value, an Arrow ``take``; a binary column cannot point into the Fetch buffer, whose values
are separated by the next record's header, and Spark takes no other type than the schema's
``binary``: ``pa_schema.equals`` in pyspark's plan_data_source_read). A sink task's
``write_batches`` took 49.3, 82.9 and 98.8 against the Producer's 27.4, 42.4 and 37.8
there: the encoded copies of the values it held to its end cost 0.3-0.5 s per 10,000 rows
whenever the allocator took fresh memory for them. Sent as views of the batch's values
since (no copy), 25.9 and 41.1 against 22.5 and 39.6, where the old code took 35.5 and
76.3 against 33.8 and 33.4 in the runs between (load 8-9). In Spark the workers' medians
did not move (52-66 us/row either way, a call's first round 0.53-0.57 CPU-s against
1.01-1.19 before). Inside Spark the source's query adds the JVM (57-76 us/row, about 0.4
s of it per query) and the runner process (0.5-1.7 s a query) to the workers' 33-38
us/row, so on two cores its batch cannot reach 0.8x the Consumer by jetspark's Python
alone; the foreach_batch_sink call holds a task's rows until the last one came (its
content order, spec/spark.md "Row order", is what makes a replay exactly-once), then sends
them.

The Python workers inside Spark (issue 39, 2026-11-30, perf on the two workers of a
10,000 x 16 KiB query, load ~9): ~22% of their samples were the garbage collector
(``gc_collect_main`` and its visitors), mostly the full ``gc.collect()`` pyspark's daemon
runs after every task over the ~51,000 objects of pyspark, pyarrow, numpy and the SDK (40 ms
a collection at load 19). jetspark now freezes that heap once per worker and path
(:mod:`jetspark._worker_heap`): 71 objects left to a collection, the workers' CPU per query
0.45-0.56 -> 0.35-0.37 s (load 11-36). What the workers spend now is mostly copies: the
kernel's into the Fetch buffers and into the Unix socket to the JVM, the Arrow take, the
CRC, and page faults of fresh buffers (~18,000 a query); the JVM (0.86-1.27 s a query, its
executor tasks 0.29-0.36 s) and the source runner's start (2-3 CPU-s a query, pyspark
imported from its zip; the tests' worker Python, tests/support/spark_python.sh, avoids
that) are Spark's.

The source runner (2026-11-30, helper spark): the bench's session runs Spark's Python
through :mod:`jetspark.worker_python` (``local_spark`` does), which imports pyspark
compiled from site-packages. The runner's imports took 2.20-2.38 CPU-s from the zip and
0.86-1.03 s so (5 pairs, load 22-26); sampled from /proc every 20 ms, a whole runner took
0.99-1.19 CPU-s a 100-row query (load 29-34), where a session without it failed every
query at load 30-34 ("Python worker failed to connect back": the runner has 10 s). In this
bench (``JET_BENCH_SPARK_PARTS=16384 --quick``, 17cb566 then this tree): other Python
processes 2.99 -> 1.18 s a query, Python workers 0.09 -> 0.09 s (load 20-24, then 10-19).
What is left of the runner is pyspark's own imports (pyspark.sql, pyarrow, numpy). Larger
Arrow batches do not help at 16 KiB: option fetchMaxBytes 1, 4 (the default) and 16 MiB,
alternating in one session, 10,000 rows, 3 queries each, load 28-36: workers 0.77-0.82 /
0.41-0.56 / 0.44-0.51 CPU-s a query, JVM 1.06-1.51 / 0.99-1.19 / 0.95-1.04 s. The
workers' perf profile (10,000 rows, load ~40): 37% kernel (the socket copies in and out,
page clearing), 11% memmove (the Arrow take; pyarrow hands the IPC body to pyspark's socket
file as a Buffer, not copied), 4% the CRC, 4% the collector.

The sinks and the source's floor at 16 KiB (2026-11-30 14:10-15:30, helper spark, load
11-47 throughout: other sessions shared the 2 cores; wall figures are that load's). A
foreach_batch_sink call of 2,000 x 16 KiB rows (2 Spark partitions) is three phases in a
row: Spark's job start (an empty batch's call 0.10-0.11 JVM CPU-s, an empty
``mapInArrow(...).collect()`` 0.09 s: Spark's, not jetspark's), the JVM's Arrow stream to
the two workers (a ``mapInArrow`` that only counts the batches: JVM 0.29 s a call against the
sink's 0.33-0.36 s, workers 0.02 s against 0.11-0.13 s), then the send, which cannot
start before a task's last row (the content order that makes a replay exactly-once needs
them all) and took about the Producer's time for the same bytes (task timelines, load
19-21: first Arrow batch 0.1-0.3 s after the task's start, the sort 3-70 ms, the send and
acks 0.29-0.87 s; the Producer 0.73-0.95 s for all 2,000). The sink's Python side is at par
with the Producer; what the ratio loses is Spark's job and Arrow stream ahead of the send.
maxBytesPerBatch 512 KiB / 1 / 4 / 16 MiB, alternating, 6 calls each (load 44-48): JVM
0.33 / 0.31 / 0.28 / 0.36 CPU-s a call, workers 0.23 / 0.16 / 0.12 / 0.11 s: 4 MiB stays.
df.write against foreach_batch_sink (6 alternating pairs, load 31-37): JVM 0.30 vs 0.36
s a call (0.22-0.32 vs 0.29-0.44), workers 0.13 s both, empty calls 0.12 vs 0.11 s.
The source's floor (part ``floor``, :mod:`bench.bench_spark_floor`: Spark's own parquet
directory stream and a ``rate-micro-batch`` source of a 16 KiB literal, the same counting
foreachBatch, against the Consumer, alternating; ``JET_BENCH_SPARK_PARTS=floor python -m
bench spark --quick``, 2,000 rows, 3 rounds): at load 25 the jetstream source 0.18x,
parquet 0.21x, the literal (no read at all) 0.42x; 1-row batches 1.2 / 1.3 / 0.7 s of
1.6 / 1.3 / 0.7 s batches; a query 0.66 / 0.60 / 0.39 JVM CPU-s and 0.12-0.21 s of other
Python, where the Consumer's whole read took 0.07 CPU-s. At load 43-47, 0.12-0.16x,
0.18-0.21x, 0.25-0.32x. Spark's micro-batch itself (offsets WAL and commit, planning, a
job) costs several times the Consumer's read of 2,000 values of 16 KiB, whatever the
source: at this size no Spark source reaches 0.8x here. At 10,000 rows (the full run's
size, ``JET_BENCH_SPARK_LARGE_ROUNDS=2``, load 16-25) they can: parquet 1.08x, the
literal 1.26x, the jetstream source 0.42x (batches 1.97 / 1.68 / 5.00 s, 1-row batches
1.6 / 1.1 / 1.1 s, 38 / 62 / 386 us/row beyond them; a query's JVM 0.79 / 0.57 / 1.16
CPU-s, Python workers 0 / 0 / 0.52 s, other Python 0.19 / 0.13 / 0.74 s; the Consumer
0.42 CPU-s). So the row is not blocked by Spark at that size; what costs is the Python
path: the Arrow stream between the JVM and its workers, the workers and the runner. A
JVM-native reader (not built) would need, in a jar beside pyspark's (javac 17 here): a
DataSource V2 ``MicroBatchStream`` with ``SupportsAdmissionControl`` and
``SupportsTriggerAvailableNow`` whose offsets are the Python source's JSON (checkpoints
carry over), partition planning by stored bytes as :mod:`jetspark.source` does, a
columnar ``PartitionReader`` decoding Fetch answers (spec/ record format, CRC-32 by
``java.util.zip.CRC32``) into an ``OnHeapColumnVector`` of the values (one copy, as the
parquet reader makes), and a NATS request client for jet's protocol: no NATS jar comes
with pyspark (netty does), so a small one over netty or a socket. Not measured on a
quiet machine.

The JVM reader (2026-11-30 17:00-18:40, helper spark): built since, format
``jetstream-jvm`` (:mod:`jetspark.jvm`, Java sources in ``jetspark/java``, compiled at
first use): a DSv2 ``MicroBatchStream`` (``SupportsTriggerAvailableNow``, admission by
maxRecordsPerTrigger) and batch ``Scan`` whose row-based ``PartitionReader`` speaks jet's
protocol over a plain socket (Hello, Metadata, ListOffsets, Fetch one request ahead; the
answer buffer reused), checks each record's CRC (``java.util.zip.CRC32``) and copies key
and value once into the row; the offsets are the Python source's JSON byte for byte. It
prints beside the jetstream source here and in part ``floor``. Part ``floor``, 10,000 x
16 KiB, 3 rounds: with tests running beside it (load 42) jetstream 0.52x, jetstream-jvm
0.43x, parquet 0.54x, the literal 0.91x; a query's CPU JVM 1.02 / 0.97 / 0.72 / 0.43 s,
Python 0.95 / 0.14 / 0.18 / 0.15 s. Reusing the answer buffer, alone (load 47): jetstream
0.45x, jetstream-jvm 0.73x, parquet 1.34x, the literal 1.81x (batches 7.25 / 4.44 / 2.42 /
1.79 s, 1-row batches 2.09 / 1.56 / 1.83 / 1.56 s, 516 / 288 / 59 / 23 us/row beyond
them); a query's CPU JVM 0.96 / 0.84 / 0.52 / 0.41 s, Python 1.51 / 0.12 / 0.18 / 0.13 s,
the Consumer 0.33 s in 3.25 s. Beyond its batch's fixed cost the JVM reader reads at the
Consumer's pace (288 us/row against the Consumer's 325): what it reads is bounded by the
server, and the batch's fixed cost is Spark's. ``JET_BENCH_SPARK_PARTS=16384 --quick``
(2,000 rows, 3 rounds, load 50, the spark tests running beside): both readers 0.12x (211
rows/s against the Consumer's 1,799); a query's CPU: JVM 0.95 s and Python 1.55 s
(jetstream) against JVM 1.00 s and Python 0.15 s (jetstream-jvm): at 2,000 rows Spark's
per-query cost is the batch, as the floor found for every source. So the 0.8x target is
NOT met at this load; the JVM reader takes a third of the Python source's CPU a query
(1.0 against 2.5 CPU-s) and no Python worker. With the snapshot's ListOffsets pipelined
(floor, 10,000 rows, 2 rounds, load 13): jetstream 0.38x, jetstream-jvm 0.59x, parquet
1.03x, the literal 1.01x (1-row batches 1.38 / 0.64 / 1.26 / 0.92 s; 242 / 180 / 13 / 50
us/row beyond them, the Consumer 143 us/row over its 8 partitions at once, where Spark's
two task slots read two, one Fetch ahead each; a query's JVM CPU 1.10 / 1.01 / 0.68 / 0.52 s).

Several ranges a task, FetchStream (2026-11-30 19:55-21:45, helper spark, load 35-47
throughout: every wall figure is that load's). The JVM reader's tasks now send a FetchStream
per range (the server pushes its answers while the task builds rows; Fetch where the server
lacks api 18, or option fetchStream false) and, when a batch's ranges outnumber Spark's
task slots, that many tasks read several ranges each at once (option groupPartitions).
A/B of the four modes in one session (ad hoc, alternating, 10,000 x 16 KiB, 8 partitions,
local[2], batch time ``triggerExecution``): 3 rounds at load 38-41, the Consumer 2.84 s:
Fetch one range a task (the old reader) 0.60x, FetchStream one a task 0.45x, Fetch grouped
0.54x, FetchStream grouped 0.80x; 5 rounds at load 37-46 (tests beside), the Consumer
6.12 s: 0.60x / 0.65x / 0.76x / 0.80x, the JVM's CPU a query 1.08 / 1.04 / 0.88 / 0.86 s.
Grouping carries most of it (two tasks instead of eight: fewer task launches, four
answers in flight a task). Inside a task (nanoTime counters, logged at DEBUG by logger
``jet.spark`` when a task closes; 10,000 rows, load 39-47): grouped FetchStream tasks of
5,000 rows spent 1.34-1.79 s waiting for and reading answers (the server's pace), 0.20-0.76
s checking CRCs, 0.48-1.13 s building rows (two copies of 16 KiB a row: ours into the
row's byte[], Spark's into the UnsafeRow) and 0.31-1.15 s in Spark, of 2.6-4.4 s. A
columnar reader would not save a copy here: foreachBatch turns its batch into rows
(ForeachBatchSink's ``toRdd``), so Spark's copy stays, and ours would become the column
vector's. ``JET_BENCH_SPARK_PARTS=16384 --quick`` (2,000 rows, 3 rounds, the spark tests
running beside): 28cc276 at load 36, jetstream-jvm 0.16x (479 rows/s against the Consumer's
2,985), the JVM 0.90 CPU-s a query; this tree at load 39, 0.21x (412 against 1,997), 0.70
s. At 2,000 rows the batch's fixed cost is still Spark's (part ``floor`` above). The sinks
(item 3) were not worked on in this session.

The 16 KiB row count, the sinks' stages, TLS (2026-11-30 22:40-00:30, helper spark, load
30-50 throughout: seven other sessions shared the 2 cores, so every wall figure is that
load's and the CPU counts are what to compare). The row count: the JVM reader, the Consumer
and a 1-row batch alternating in one session (ad hoc, 2 rounds, load 30-43): a 1-row
batch took 4.5 s inside (0.6-1.4 s quiet: Spark's micro-batch, whatever the source, as
part ``floor`` found); at 2,000 rows the batch took 6.37 s against the Consumer's 1.09
(0.17x), at 10,000 rows 5.17-7.52 s against 5.13 (0.68-1.00x), at 30,000 rows 9.39 s
against 9.58 (1.02x). A query's JVM CPU was 0.73-0.77 / 0.81-0.85 / 1.28-1.45 s: about
0.7 s a query, then 23 us/row asking 8 MiB an answer and 30 us/row asking 4 MiB (8 MiB
took 4-12% less JVM CPU at every count; the server clamps to its ``max_fetch_bytes``, 8
MiB by default, so the JVM reader's default is that now, the Python source's stays 4 MiB).
The 100 B and 1 KB rows read 100 MB of values (a million and 100,000 rows), where the
per-row costs decide; at 16 KiB the same 100 MB is 6,100 rows, where the batch's fixed
second still weighs: for it to be at most about a fifth of the batch at the Consumer's
140-550 us/row, 16 KiB needs ~20,000 rows. So part ``16384`` compares the source at
:attr:`Scale.source_count` rows too (20,000 with ``--quick``, 30,000 in the full run),
the JVM reader only, printed after the 2,000 or 10,000 rows lines, both kept (the Python
source's warm-up query at 20,000 rows failed the whole run at load 46: its runner did not
connect back within Spark's fixed 10 s). Every query read its rows in one
micro-batch (Trigger.AvailableNow, no maxRecordsPerTrigger): "in 1 batch(es)".

The sinks per stage (ad hoc, foreach_batch_sink's own task with timestamps, 2 tasks,
ack ALL, calls alternating with the Producer, a counting ``mapInArrow`` and each request
size; seconds from the call's start, medians): 2,000 x 16 KiB (6 rounds, load 33-35): the
tasks started 0.39 s after the call (Spark's job start), their first Arrow batch came at
0.65, the last at 1.04 (the JVM's Arrow stream, 16 MiB a task: a counting mapInArrow
alone took 0.99 s to its end), the content sort ended at 1.08, the send took 0.51 s
(1,000 rows a task, in parallel), the call returned at 1.77 s against the Producer's 0.92
(0.52x). What is ours there is the sort (0.04 s) and the send, which goes faster than the
Producer's (its 2,000 rows in 0.92 s); what the ratio loses is Spark's job start and
Arrow stream ahead of a send that cannot start before a task's last row (the content
order that makes a replay exactly-once). Requests of 4 MiB instead of 1 MiB (the sinks'
default now, at most half the server's ``max_frame_bytes``): the server's CPU a call 0.16
s against 0.22 s (the Producer's 0.19), the send's wall alike at this size. 10,000 x 16
KiB (3 rounds, load 38-44): Producer 12.8 s, the sink 14.3 s with 1 MiB requests and 15.2
s with 4 MiB (0.90x / 0.84x; the rounds' spread 9.3-22.1 s), the send 10.1 against 6.8 s,
the server's CPU a call 1.22 against 0.77 s (the Producer's 1.18), the workers' 0.73
against 0.64 s: past Spark's job start the sinks keep the Producer's pace.

``JET_BENCH_SPARK_PARTS=16384 python -m bench spark --quick``, this bench file over
/tmp/base25's packages (e793e834) and over this tree, one pair (the base first; a second
pair did not fit the session; wall ratios are the load's): 2,000 rows, base at load 16-28
/ this tree at load 29-39: jetstream 0.11x / 0.14x, jetstream-jvm 0.19x / 0.18x (JVM 0.82
/ 0.73 CPU-s a query), foreach_batch_sink 0.52x / 0.42x (JVM 0.44 / 0.41 s, workers 0.18
/ 0.14 s a call), df.write 0.60x / 0.53x (JVM 0.29 / 0.35 s, workers 0.16 / 0.13 s);
20,000 rows: jetstream-jvm 1.34x / 1.10x of the Consumer in its batch (1.14x / 0.90x
with the query's start), the JVM 1.26 / 1.24 CPU-s a query. So at 20,000 rows the JVM
reader meets 0.8x either way; at 2,000 neither reader nor any Spark source does (part
``floor``, base, load 49: Consumer 2,210 rows/s, jetstream 0.03x, jetstream-jvm 0.18x,
parquet 0.12x, the literal 0.17x, 1-row batches 3.4-5.5 s). The sinks at 2,000 rows
stay under 0.7x: Spark's job start and Arrow stream come before a send that cannot start
earlier; at 10,000 rows they were at 0.84-0.90x (above).

TLS: the JVM reader takes the Python source's TLS options now (tls, tlsCa, tlsCert +
tlsKey, tlsServerHostname; ``jet.spark.JetTls``): ``source_format`` no longer sends a TLS
read to the Python reader.

Session 26 (2026-12-01 01:50-03:40, helper spark; the load was 13-48 throughout, eight
sessions on the 2 cores, so every wall figure and ratio below is that load's and the CPU
counts are what to compare). The JVM reader at 20,000 x 16 KiB rows (ad hoc, tasks' nanoTime
counters at DEBUG, the JVM's GC MXBeans, the server's CPU from /proc; load 13-16): a task
of 10,000 rows (4 ranges, FetchStream, 26-28 answers) took 1.5-2.9 s: 0.82-1.30 s waiting
for answers, of which the task thread's own CPU was 85-99 ms (a socket read of ~6 MB an
answer) and the server's CPU for the whole query 0.08-0.10 s (sendfile; the Consumer's read
0.13-0.17 s), checks 0.07-0.30 s, rows 0.25-0.78 s, Spark's rest 0.10-0.51 s. So the
largest piece is waiting while neither side works: the task reads an answer only after it
took the previous one's rows, and the server's next answer waits for room in the socket.
The JVM's collector weighed as much: a query's young collections took 0.09-1.6 s (4-7 of
them), and a full collection (SerialGC's MarkSweepCompact, 0.57-1.29 s, stopping both tasks)
came in 3 of 4 queries. Now (option ``readAhead``, default true, ``jet.spark.JetAhead``) a
thread of the task reads its connection's answers while the task builds rows, up to 2
answers ahead, into 3 buffers that the executor keeps for its next tasks (at most 12), not
a new set of 8 MiB buffers each task (my reading: long-lived, they fill the old generation;
not measured apart from the counts below).
In one session, alternating, 3 rounds, load 32-37, the Consumer 4.45 s: readAhead 0.92x
(the JVM 1.01 CPU-s a query), without 0.76x (1.14 s); with 2 MiB answers 0.67x (1.16 s)
and 0.74x (1.20 s); full collections in 2 of 12 queries (both at 8 MiB answers). Read ahead
without kept buffers (load 28-39, 4 rounds) had been worse: 0.47x against 0.92x, 1.75
against 1.21 CPU-s, its three buffers a task new each time. /tmp/base26 (e1b6d0ab) against
this tree, one process each, alternating, 3 rounds each (load 39-48): 0.92x both, the JVM
1.50 against 1.41 CPU-s a query (medians). Again in one session (this tree, 3 rounds, load
35-39, the Consumer 9.42 s): readAhead 1.02x (1.37 CPU-s), without 0.73x (1.45 CPU-s); one
query without it had a full collection of 2.95 s. Not confirmed on a quiet machine. What
is left is mostly the collector (young collections 0.3-1.6 s a query at 330 MB of values
copied once by the reader and again by Spark, and the full ones) and Spark's batch: next,
the JVM's heap and young generation in ``jetspark.demo.local_spark`` (SerialGC, 1 GiB
driver), and the CRC checks moved to the read-ahead thread (0.07-0.30 s a task).

The sinks at both row counts (session 26, helper spark): part ``16384`` now runs the sinks
at :attr:`Scale.large_count` and at :attr:`Scale.source_count` rows (2,000 and 20,000 with
``--quick``), and at 16 KiB prints each foreach_batch_sink call's stages
(:mod:`bench.bench_spark_sinks`: an empty call, a counting ``mapInArrow`` of the same rows,
the call; medians). ``JET_BENCH_SPARK_PARTS=16384 python -m bench spark --quick``
(eaa960f2 + the bench, 3 rounds, load 28-49): at 2,000 rows foreach_batch_sink 0.50x and
df.write 0.49x of the Producer (663 rows/s), the stages: Spark's job start 1.26 s, + the
Arrow stream 3.51 s, the call 6.08 s, where the Producer sent the same rows in 3.02 s; at
20,000 rows 1.01x and 1.10x (the Producer 1,375 rows/s): job start 0.59 s, + the Arrow
stream 3.16 s, the call 14.46 s against the Producer's 14.55 s. So the sinks' 0.7x target
is judged at 20,000 x 16 KiB, as the source's 0.8x is: at 2,000 rows Spark's part (its job
start and its Arrow stream, before a task's last row lets the send start) took longer than
the Producer's whole send, whatever the sink does after it; at 20,000 it is a fifth of the
call, and the sink's own part (the content sort and the send with ack ALL, 11.3 s) went at
the Producer's pace. Nothing of the sinks was changed in this session: what is ours there
was not slower than the Producer. The JVM reader in the same run: 0.18x at 2,000 rows (the
Python source 0.10x), 0.62x at 20,000 (2,577 against the Consumer's 4,133 rows/s, load
29; the JVM 1.37 CPU-s a query, where session 25's run had 1.24-1.26 s at load 16-39):
NOT met in this run.

The JVM reader's garbage (session 27, 2026-12-01 04:45-06:30, helper spark; load 12-49,
eight sessions on the 2 cores, so pause times and ratios are that load's; the counts are what
to compare). Ad hoc, 20,000 x 16 KiB, 8 partitions, local[2], a counting foreachBatch, the
Consumer before each query, GC counts from the JVM's collector MXBeans and -Xlog:gc, 3
queries a session. a7cd68ab with local_spark's options (C1, SerialGC, spark.driver.memory
1 GiB; load 12.5): 4-5 young collections a query (0.15-0.34 s), a full one (0.68 s) in 1
of 3, the JVM 1.15-1.81 CPU-s a query. The heap never grew past its first 365 MB (-Xms is
1/64 of the RAM), so eden was ~100 MB, and each young collection promoted 16-50 MB, which
filled the old generation. JFR's allocation samples over two such queries (load ~25): of
1.57 GB, 625 MB the reader's copy of each value (``Arrays.copyOfRange``, a new 16 KiB array
a row), 160 MB new answer buffers (about 20 of 8 MiB: a buffer kept from a shorter answer
was replaced by one a few bytes larger), the rest Spark's (class loading ~300 MB, strings),
boxed offsets 11 MB. Spark's Project to UnsafeRow copies into a buffer it reuses (nothing
new a row), and the physical plan always has that Project above the scan
(``*(1) Project [...] +- MicroBatchScan``). Now a row's key and value arrays are the
previous row's when the length is the same (refilled: Spark has made its own row from them
before it asks for the next, as with the subject, which already pointed into the answer's
buffer), a new answer buffer is as large as the largest answer yet (up to fetchMaxBytes + 1
MiB), and the CRC checks run where the answer is read (the read-ahead thread). This tree
(load 38-49): 0-1 young collection a query, no full collection in 9 queries. The JVM's
options (this tree, one session each, load 38-47): SerialGC as it was 0-1 young a query but
4 full collections (Metadata GC Threshold, 0.19-1.38 s each) in the session's first
queries; with -XX:MetaspaceSize=256m (and -Xmn256m) none; G1 with it: 0-1 young a query,
none full. So local_spark's JVM_OPTIONS add -XX:MetaspaceSize=256m and keep SerialGC and
the heap (docs/tutorial/spark.md, "Memory", for a user's own Spark). The wall ratio at that
load moved 0.56-1.21x whatever the options: not a figure. A corrupt record (a CRC
mismatch) made a task retry forever (the retry counter was reset when the answer arrived,
before its records were checked): it now fails after 6 attempts, naming the offset
(tests/spark/test_jvm_reader_rows.py). ``JET_BENCH_SPARK_PARTS=16384 python -m bench spark
--quick``, /tmp/base27 (a7cd68ab) then this tree, one process each, one pair (a second did not
fit the session; load 34-43 throughout): jetstream-jvm at 20,000 rows 1.12x / 1.02x of the
Consumer (1,891 / 4,308 rows/s: the load's), the JVM 1.25 / 0.97 CPU-s a query (medians of
3); at 2,000 rows 0.26x / 0.20x, 0.94 / 0.85 CPU-s; the sinks (not changed) at 20,000 rows
foreach_batch_sink 1.03x / 1.17x, df.write 0.51x / 0.54x, at 2,000 rows 0.50x / 0.39x and
0.51x / 0.37x. Not confirmed on a quiet machine. The 100 B part once on this tree
(``JET_BENCH_SPARK_PARTS=100 --quick``, 50,000 rows, load 9-12): jetstream 0.85x,
jetstream-jvm 1.51x (the JVM 0.68 CPU-s a query), foreach_batch_sink 1.10x, df.write 0.88x:
every target met.

Full run: 1,000,000 x 100 B, 8 partitions, local[2], 3 rounds; 100,000 x 1 KB, one round;
10,000 x 16 KiB, :data:`LARGE_ROUNDS` rounds, and the source and sinks at 30,000 x 16 KiB.
``--quick``: 50,000, 10,000 and 2,000 rows, and the source and sinks at 20,000 x 16 KiB.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
import attrs

from bench.bench_spark_cpu import Cpu, cpu_now, cpu_since
from jetsdk import AckPolicy, Client, Consumer, Producer, Table
from jetserver.testing.devcluster import DevCluster
from jetspark.jvm import JVM_FORMAT

PARTITIONS = 8
VALUE_BYTES = 100
KB_VALUE_BYTES = 1000
LARGE_VALUE_BYTES = 16 * 1024
"""Issue 39: the source and sinks keep their ratios at 16 KiB values."""
WRITE_ARROW_BATCH_BYTES = "4m"
"""spark.sql.execution.arrow.maxBytesPerBatch for ``df.write`` (docs/tutorial/spark.md
advises it; at 16 KiB values 256 rows a batch); foreach_batch_sink sets it itself."""
KEYS = 1000
CACHE_BYTES = 200_000_000
"""Rows up to this many value bytes are cached for the sinks' calls (20,000 x 16 KiB, 328
MB, are not: the session's 1 GiB heap)."""
WARM_ROWS = 64
"""Rows of each sink's untimed warm-up call (:func:`_warm_sinks`)."""
FIXED_CALLS = 5
"""Calls per fixed-cost figure (median)."""
LARGE_ROUNDS = 3
"""Rounds at 16 KiB values (``JET_BENCH_SPARK_LARGE_ROUNDS``): one round is a few seconds,
and a ratio from a single round moved by a factor of 2 between runs on the shared machine."""

SOURCE_TARGET = 0.8
"""source >= 0.8x the jetsdk Consumer, inside batches."""
FOREACH_TARGET = 0.7
"""foreach_batch_sink (ack ALL) >= 0.7x the jetsdk Producer."""
WRITE_TARGET = 0.7
"""df.write >= 0.7x the jetsdk Producer."""


@attrs.frozen
class Scale:
    count: int
    rounds: int
    kb_count: int
    large_count: int
    """Rows of LARGE_VALUE_BYTES (16 KiB)."""
    source_count: int
    """Rows of 16 KiB of the source's and the sinks' second comparison, where Spark's
    fixed cost of a micro-batch or a job no longer decides the ratio (the 16 KiB targets
    are judged here, :data:`SOURCE_ROWS_NOTE`)."""


FULL = Scale(count=1_000_000, rounds=3, kb_count=100_000, large_count=10_000, source_count=30_000)
QUICK = Scale(count=50_000, rounds=3, kb_count=10_000, large_count=2_000, source_count=20_000)
SOURCE_ROWS_NOTE = (
    "the 16 KiB targets are judged here: a micro-batch costs Spark about a second before its"
    " first row (a 1-row batch: 0.6-1.4 s quiet, 4.5 s at load 30-40), whatever the source,"
    " and a sink's call its job start and Arrow stream before a task can send, where the"
    " Consumer reads 16 KiB in 140-550 us/row: below ~20,000 rows those fixed costs, not the"
    " read or the send, decide the ratios; the source: the JVM reader only (the Python"
    " source's own path bounds it at 16 KiB, part floor, and its runner failed to start"
    " within Spark's 10 s at load 46)"
)
"""Why the 16 KiB source is also compared at :attr:`Scale.source_count` rows (issue 39:
"keep their ratios at 16 KiB"): the 100 B and 1 KB rows read 100 MB of values, a million
and 100,000 rows, where the per-row costs decide; at 16 KiB the batch's fixed cost must
be at most about a fifth of the batch for the same (2026-11-30, helper spark, measured in
the module docstring)."""


async def _produce(
    servers: list[str], stream: str, count: int, value_bytes: int, *, compact: bool = False
) -> float:
    """Create ``stream`` and send ``count`` keyed messages with ack ALL; seconds taken."""
    value = b"x" * value_bytes
    async with Client(servers) as client:
        await client.create_stream(stream, partitions=PARTITIONS, compact=compact)
        started = time.perf_counter()
        async with Producer(client, stream, ack=AckPolicy.ALL) as producer:
            for i in range(count):
                await producer.send_soon(value, b"k%d" % (i % KEYS))
            await producer.flush()
        return time.perf_counter() - started


async def _consume(servers: list[str], stream: str, count: int) -> float:
    async with Client(servers) as client:
        started = time.perf_counter()
        seen = 0
        async with Consumer(client, stream, start="earliest") as consumer:
            while seen < count:
                seen += len(await consumer.fetch(max_records=10_000, timeout=5.0))
        return time.perf_counter() - started


async def _table_open(servers: list[str], stream: str) -> float:
    """Seconds to open a jetsdk Table on ``stream`` (a full replay; KEYS keys)."""
    async with Client(servers) as client:
        started = time.perf_counter()
        async with Table(client, stream, timeout=600.0) as table:
            seconds = time.perf_counter() - started
            if len(table) != KEYS:
                raise RuntimeError(f"the table holds {len(table)} keys, not {KEYS}")
        return seconds


def _spark_table(spark: Any, servers: str, stream: str) -> float:
    """Seconds for ``spark.read ... option("table", stream)`` to count its KEYS rows."""
    started = time.perf_counter()
    rows = spark.read.format("jetstream").option("servers", servers).option("table", stream)
    got = rows.load().count()
    seconds = time.perf_counter() - started
    if got != KEYS:
        raise RuntimeError(f"the table read gave {got} rows, not {KEYS}")
    return seconds


async def _create(servers: list[str], stream: str) -> None:
    async with Client(servers) as client:
        await client.create_stream(stream, partitions=PARTITIONS)


async def _count(servers: list[str], stream: str) -> int:
    async with Client(servers) as client:
        total = 0
        for part in range(PARTITIONS):
            total += (await client.list_offsets(stream, part, "latest")).hw
        return total


def _spark_source(
    spark: Any, servers: str, stream: str, count: int, fmt: str = "jetstream"
) -> tuple[float, float, int, Cpu]:
    """(wall seconds, seconds inside batches, batches, CPU seconds of the JVM and its
    Python processes for the query from start to end), reading with format ``fmt``
    (``jetstream-jvm``: the JVM reader, :mod:`jetspark.jvm`)."""
    counted: list[int] = []
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as checkpoint:
        cpu = cpu_now(spark)
        started = time.perf_counter()
        query = (
            spark.readStream.format(fmt)
            .option("servers", servers)
            .option("streams", stream)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.foreachBatch(lambda df, _id: counted.append(df.count()))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(1800)
        wall = time.perf_counter() - started
        spent = cpu_since(spark, cpu)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        inside = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    if sum(counted) != count:
        raise RuntimeError(f"the source counted {sum(counted)} records, not {count}")
    return wall, inside, len(batches), spent


def _rows(spark: Any, count: int, value_bytes: int) -> Any:
    """``count`` rows of a key and a value of ``value_bytes`` in 2 Spark partitions, cached
    up to :data:`CACHE_BYTES` (above, each job makes them again: a literal, cheap)."""
    from pyspark.sql import functions as F

    df = spark.range(count, numPartitions=2).select(
        F.concat(F.lit("k"), (F.col("id") % KEYS).cast("string")).alias("key"),
        F.lit("x" * value_bytes).alias("value"),
    )
    if count * value_bytes > CACHE_BYTES:
        return df
    df = df.cache()
    df.count()
    return df


def _write(df: Any, servers: str, stream: str) -> None:
    """``df.write`` with the Arrow batch bytes docs/tutorial/spark.md advises."""
    conf = df.sparkSession.conf
    conf.set("spark.sql.execution.arrow.maxBytesPerBatch", WRITE_ARROW_BATCH_BYTES)
    try:
        df.write.format("jetstream").option("servers", servers).option("stream", stream).mode(
            "append"
        ).save()
    finally:
        conf.unset("spark.sql.execution.arrow.maxBytesPerBatch")


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _ratio_line(label: str, rates: list[float], base: float | None, target: float | None) -> None:
    rate = statistics.median(rates)
    if base is None:
        tail = "    1.00x"
    else:
        tail = f"  {rate / base:6.2f}x"
        if target is not None:
            verdict = "met" if rate / base >= target else "NOT met"
            tail += f"  (target >= {target:.1f}x: {verdict})"
    spread = f"[{min(rates):,.0f}..{max(rates):,.0f}]" if len(rates) > 1 else ""
    print(f"  {label:<42}{rate:>11,.0f} rows/s {spread:<22}{tail}", flush=True)


def _ms_line(label: str, seconds: list[float]) -> None:
    print(f"  {label:<58}{statistics.median(seconds) * 1000:>9.1f} ms", flush=True)


def _fixed_costs(spark: Any, servers: list[str], joined: str) -> None:
    """Median ms of empty and 1-row batches through each path."""
    import jetspark

    anyio.run(_produce, servers, "bench-one", 1, VALUE_BYTES)
    anyio.run(_produce, servers, "bench-empty", 0, VALUE_BYTES)
    one = _rows(spark, 1, VALUE_BYTES)
    empty = one.limit(0).cache()
    empty.count()

    def read_count(stream: str) -> None:
        spark.read.format("jetstream").option("servers", joined).option(
            "streams", stream
        ).load().count()

    micro: list[float] = []
    for _ in range(FIXED_CALLS):
        _wall, inside, _n, _cpu = _spark_source(spark, joined, "bench-one", 1)
        micro.append(inside)
    reads = {
        s: [_timed(lambda s=s: read_count(s)) for _ in range(FIXED_CALLS)]
        for s in ("bench-empty", "bench-one")
    }
    anyio.run(_create, servers, "bench-fixed")
    sink = jetspark.foreach_batch_sink(joined, "bench-fixed", name="bench-fixed")
    calls = iter(range(1_000_000))
    fb = {
        name: [_timed(lambda df=df: sink(df, next(calls))) for _ in range(FIXED_CALLS)]
        for name, df in (("empty", empty), ("1-row", one))
    }
    wr = {
        name: [_timed(lambda df=df: _write(df, joined, "bench-fixed")) for _ in range(FIXED_CALLS)]
        for name, df in (("empty", empty), ("1-row", one))
    }
    print(f"fixed cost per batch (median of {FIXED_CALLS})")
    _ms_line("source: 1-row micro-batch (triggerExecution)", micro)
    _ms_line('source: spark.read.format("jetstream").count(), empty', reads["bench-empty"])
    _ms_line('source: spark.read.format("jetstream").count(), 1 row', reads["bench-one"])
    _ms_line("foreach_batch_sink call, empty batch", fb["empty"])
    _ms_line("foreach_batch_sink call, 1-row batch", fb["1-row"])
    _ms_line('df.write.format("jetstream"), empty', wr["empty"])
    _ms_line('df.write.format("jetstream"), 1 row', wr["1-row"])


def _warm_sinks(spark: Any, servers: list[str], joined: str, value_bytes: int) -> None:
    """One untimed call of each sink with WARM_ROWS rows of ``value_bytes``, as the source
    has its warm-up: the first ``df.write`` of a session also starts Spark's Python workers
    for the data source's look-up, planning and commit, and the writer task's first Arrow
    sort and take (a fresh worker's pyarrow kernels); measured at 16 KiB under load 10-12,
    a first round's write took 2.9-7.7 s where the next took 2.0-6.9 s, its task's sort
    and take 2.8-3.5 s of wall (0.6 s CPU) against 0.24-0.8 s (0.11 s) after."""
    import jetspark

    warm = _rows(spark, WARM_ROWS, value_bytes)
    tag = f"{value_bytes}b"
    for stream in (f"bench-warm-fb-{tag}", f"bench-warm-ds-{tag}"):
        anyio.run(_create, servers, stream)
    jetspark.foreach_batch_sink(joined, f"bench-warm-fb-{tag}", name="bench-warm")(warm, 0)
    _write(warm, joined, f"bench-warm-ds-{tag}")
    warm.unpersist()


def _timed_cpu(spark: Any, fn: Callable[[], object]) -> tuple[float, Cpu]:
    """Seconds ``fn`` took, and the CPU the session's JVM and Python processes spent."""
    cpu = cpu_now(spark)
    seconds = _timed(fn)
    return seconds, cpu_since(spark, cpu)


def _cpu_line(label: str, spent: list[Cpu], count: int) -> None:
    jvm = statistics.median(c.jvm for c in spent)
    workers = statistics.median(c.workers for c in spent)
    others = statistics.median(c.others for c in spent)
    print(
        f"  {label}: JVM {jvm:.2f} s ({jvm / count * 1e6:,.0f} us/row), Python workers "
        f"{workers:.2f} s ({workers / count * 1e6:,.0f} us/row), other Python processes "
        f"{others:.2f} s (load {os.getloadavg()[0]:.1f})"
    )


def _source_rates(
    spark: Any,
    servers: list[str],
    joined: str,
    count: int,
    value_bytes: int,
    rounds: int,
    *,
    python: bool = True,
) -> None:
    """Print the source's rates (median of ``rounds``) against the jetsdk Consumer, each
    round the Consumer first: the JVM reader's, and the Python source's if ``python``."""
    src = f"bench-src-{value_bytes}b-{count}"
    anyio.run(_produce, servers, src, count, value_bytes)  # the source's records
    if python:
        _spark_source(spark, joined, src, count)  # warm-up: workers, JIT
    _spark_source(spark, joined, src, count, JVM_FORMAT)
    consume: list[float] = []
    inside: list[float] = []
    wall: list[float] = []
    source_cpu: list[Cpu] = []
    jvm_inside: list[float] = []
    jvm_wall: list[float] = []
    jvm_cpu: list[Cpu] = []
    batches = jvm_batches = 0
    for _ in range(rounds):
        consume.append(count / anyio.run(_consume, servers, src, count))
        if python:
            w, i, batches, c = _spark_source(spark, joined, src, count)
            inside.append(count / i)
            wall.append(count / w)
            source_cpu.append(c)
        w, i, jvm_batches, c = _spark_source(spark, joined, src, count, JVM_FORMAT)
        jvm_inside.append(count / i)
        jvm_wall.append(count / w)
        jvm_cpu.append(c)
    base_read = statistics.median(consume)
    print(f"source (rows/s into a counting foreachBatch), {count:,} rows")
    _ratio_line("jetsdk Consumer (baseline)", consume, None, None)
    if python:
        _ratio_line(f"jetstream source, in {batches} batch(es)", inside, base_read, SOURCE_TARGET)
        _ratio_line("jetstream source, wall incl. query start", wall, base_read, None)
        _cpu_line(f"CPU of the whole query (start, {batches} batch(es), stop)", source_cpu, count)
    _ratio_line(
        f"{JVM_FORMAT} source, in {jvm_batches} batch(es)", jvm_inside, base_read, SOURCE_TARGET
    )
    _ratio_line(f"{JVM_FORMAT} source, wall incl. query start", jvm_wall, base_read, None)
    _cpu_line(f"CPU of the whole {JVM_FORMAT} query", jvm_cpu, count)


def _throughput(
    spark: Any, servers: list[str], joined: str, count: int, value_bytes: int, rounds: int
) -> None:
    """Print the source and sink rates (median of ``rounds``) against jetsdk. Each round
    runs a baseline and then the Spark paths it is compared with, so that a change of the
    machine's load between rounds weighs on both sides of a ratio alike."""

    tag = f"{value_bytes}b"
    unix = spark.sparkContext.getConf().get("spark.python.unix.domain.socket.enabled", "false")
    print(
        f"{count:,} rows of {value_bytes} B, {PARTITIONS} partitions, ack ALL, local[2] "
        f"(Python workers over Unix sockets: {unix}), median of {rounds} round(s) [min..max], "
        "each round a baseline then the Spark paths"
    )
    _source_rates(spark, servers, joined, count, value_bytes, rounds)
    from bench.bench_spark_sinks import sink_rates

    _warm_sinks(spark, servers, joined, value_bytes)
    sink_rates(spark, servers, joined, count, value_bytes, rounds)
    table = f"bench-tbl-{tag}"
    anyio.run(partial(_produce, servers, table, count, value_bytes, compact=True))
    _spark_table(spark, joined, table)  # warm-up
    table_open: list[float] = []
    table_read: list[float] = []
    for _ in range(rounds):
        table_open.append(count / anyio.run(_table_open, servers, table))
        table_read.append(count / _spark_table(spark, joined, table))
    print(f"table read (records/s reduced to the latest value of {KEYS:,} keys)")
    _ratio_line("jetsdk Table open (baseline)", table_open, None, None)
    _ratio_line(
        'spark.read option("table") .count()', table_read, statistics.median(table_open), None
    )


def run(quick: bool) -> None:
    """Measure and print the source and sink comparisons, fixed costs, 1 KB and 16 KiB rates."""
    scale = QUICK if quick else FULL
    parts = os.environ.get("JET_BENCH_SPARK_PARTS", "100,fixed,1000,paths,16384").split(",")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import jetspark
    from jetspark.demo import local_spark

    with open(os.devnull, "wb") as devnull, DevCluster(size=1, log_file=devnull) as dev:
        servers = dev.addresses
        joined = ",".join(servers)
        spark = local_spark("jetspark-bench", jvm_reader=True)
        try:
            jetspark.register(spark)
            if "100" in parts:
                _throughput(spark, servers, joined, scale.count, VALUE_BYTES, scale.rounds)
            if "fixed" in parts:
                _fixed_costs(spark, servers, joined)
            if "1000" in parts:
                print("at 1 KB values:")
                _throughput(spark, servers, joined, scale.kb_count, KB_VALUE_BYTES, 1)
            if "paths" in parts:
                from bench.spark_paths import run_paths

                run_paths(spark, servers, LARGE_VALUE_BYTES, _produce, _consume, _create, KEYS)
            if "floor" in parts:
                from bench.bench_spark_floor import run_floor

                rounds = int(os.environ.get("JET_BENCH_SPARK_LARGE_ROUNDS", str(LARGE_ROUNDS)))
                run_floor(
                    spark,
                    servers,
                    scale.large_count,
                    LARGE_VALUE_BYTES,
                    rounds,
                    _produce,
                    _consume,
                    _spark_source,
                )
            if "16384" in parts:
                print("at 16 KiB values:")
                rounds = int(os.environ.get("JET_BENCH_SPARK_LARGE_ROUNDS", str(LARGE_ROUNDS)))
                _throughput(spark, servers, joined, scale.large_count, LARGE_VALUE_BYTES, rounds)
                print(f"at {scale.source_count:,} rows of 16 KiB: {SOURCE_ROWS_NOTE}")
                from bench.bench_spark_sinks import sink_rates

                sink_rates(spark, servers, joined, scale.source_count, LARGE_VALUE_BYTES, rounds)
                _source_rates(
                    spark,
                    servers,
                    joined,
                    scale.source_count,
                    LARGE_VALUE_BYTES,
                    rounds,
                    python=False,
                )
        finally:
            spark.stop()


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
