"""The audit of a thread's governed records, read-only.

- :mod:`~algenta_graph.audit.chain`: the per-thread tamper-evident chain (the link format,
  sealing a node's records, the head);
- :mod:`~algenta_graph.audit.verification`: verifying a thread's chain, every break named;
- :mod:`~algenta_graph.audit.reports`: the reports as text or data;
- :mod:`~algenta_graph.audit.history`: verifying every checkpoint of a store's threads;
- :mod:`~algenta_graph.audit.export`: the JSONL export and its heads, verified offline;
- :mod:`~algenta_graph.audit.records`: reading, telling apart and formatting the records of a
  checkpoint store (no engine, no graph needed).
"""
