"""The rules of governed execution, independent of any graph node.

- :mod:`~algenta_graph.governance.gates`: the one table of gates and their policies;
- :mod:`~algenta_graph.governance.contract`: the tool-profile contract (profiles, the fields a
  model never sees);
- :mod:`~algenta_graph.governance.scrub`: the scrub of the override flags and the profile guard;
- :mod:`~algenta_graph.governance.run_settings`: what one run may change (only ever tighter);
- :mod:`~algenta_graph.governance.record_guard`: no ``update_state`` writes governed records.

Nothing here imports a node, the server or the CLI (``docs/ARCHITECTURE.md``, "Layering").
"""
