"""Server metrics: the Prometheus text exposition (:mod:`.exposition`), the metadata leader's
partition counts (:mod:`.cluster`) and the ``GET /metrics`` endpoint (:mod:`.endpoint`)."""
