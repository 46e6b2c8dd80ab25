"""jetspark.demo.local_spark's JVM (the demo's and the bench's session): the options of
jetspark.demo.JVM_OPTIONS are the running driver's (docs/tutorial/spark.md, "Memory")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

PROBE = """
from jetspark.demo import local_spark
spark = local_spark("jetspark-jvm-options")
jvm = spark._jvm
kind = jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(kind)
for name in ("MetaspaceSize", "UseSerialGC", "TieredStopAtLevel"):
    print(name, bean.getVMOption(name).getValue())
spark.stop()
"""


@pytest.mark.timeout(600)
def test_the_session_jvm_has_jetsparks_options() -> None:
    """A metaspace that starts at 256 MiB (no full collections for Spark's generated
    classes in the first queries), the serial collector, the C1 compiler only."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java for Spark")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYSPARK_PYTHON", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=500
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert got == {
        "MetaspaceSize": str(256 * 1024 * 1024),
        "UseSerialGC": "true",
        "TieredStopAtLevel": "1",
    }
