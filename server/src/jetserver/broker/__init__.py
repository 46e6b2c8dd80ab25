"""The data path of the streams this server leads: partitions, ingest, acks, produce, fetch."""
