"""Heads across a corpus (`attnviz scan`). The defaults live here, where the command line reads them
at start without importing the scan's modules."""

DEFAULT_BATCH = 32  # texts per task and per Parquet file
DEFAULT_EXAMPLES = 20  # top examples kept per head
