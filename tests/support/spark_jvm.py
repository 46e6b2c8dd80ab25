"""The JVM options of every Spark the tests start (a shared session, a doc example's own).

Tests are short and the CI box has 2 cores: the C1 compiler only (no C2 compiler threads)
and the serial GC. Measured on two test_pipeline tests under load 8-11: 141-165 s -> 77-90 s;
on the spark.md doc example at load 17-18: 156 s -> 85 s.
"""

from __future__ import annotations

JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""For ``spark.driver.extraJavaOptions`` (a session the test builds) or ``JDK_JAVA_OPTIONS``
(a Spark a program under test starts)."""
