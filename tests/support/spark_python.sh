#!/bin/sh
# The Python that Spark starts for its Python workers in the tests (PYSPARK_PYTHON; see
# tests/support/spark_jvm.py): $JET_SPARK_WORKER_PYTHON with pyspark.zip and py4j's zip
# taken out of the PYTHONPATH Spark gives it, so that pyspark and py4j are imported from
# site-packages, compiled, instead of from SPARK_HOME/python/lib/pyspark.zip, which holds
# only sources: every worker compiled each pyspark module it imported again.
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
    case "$entry" in
        */pyspark.zip | */py4j-*-src.zip) ;;
        *) kept="${kept:+$kept:}$entry" ;;
    esac
done
unset IFS
if [ -n "$kept" ]; then
    PYTHONPATH=$kept
    export PYTHONPATH
else
    unset PYTHONPATH
fi
exec "${JET_SPARK_WORKER_PYTHON:?the interpreter, set with PYSPARK_PYTHON by tests/support/spark_jvm.py}" "$@"
