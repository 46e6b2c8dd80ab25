"""Sans-I/O codecs for the jet wire and disk formats (spec/)."""
