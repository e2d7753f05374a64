"""The audit of a thread's governed records, read-only.

- :mod:`~algenta_graph.audit.chain`: the per-thread tamper-evident chain (seal, verify every
  checkpoint of a history, the JSONL export and its heads);
- :mod:`~algenta_graph.audit.records`: reading, telling apart and formatting the records of a
  checkpoint store (no engine, no graph needed).
"""
