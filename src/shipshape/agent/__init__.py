"""The per-cluster agent: watch -> snapshot/delta -> push (spool, retry) -> instructions."""
