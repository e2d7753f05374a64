"""The governed graph's nodes, each in its own module, over shared step helpers.

- :mod:`~algenta_graph.nodes.agent`: ``retrieve_tools`` and ``model``;
- :mod:`~algenta_graph.nodes.governed_tool`: ``governed_tool`` and the routing of a step;
  every call a rule names is written ahead (:mod:`~algenta_graph.nodes.write_ahead`);
- :mod:`~algenta_graph.nodes.denial_handler`: one ``denial_handler_<gate>`` per gate; what it
  asks is :mod:`~algenta_graph.nodes.questions`, what an answer may be
  :mod:`~algenta_graph.nodes.answers`, who answers :mod:`~algenta_graph.nodes.operators`,
  one answer per escalation :mod:`~algenta_graph.nodes.claiming`, and what an answer does
  :mod:`~algenta_graph.nodes.applying` (a held call run at most once, written ahead:
  :mod:`~algenta_graph.nodes.write_ahead`);
- :mod:`~algenta_graph.nodes.executor`: the execution of a decision (model path, operator
  path), held by both node kinds, with its arguments (:mod:`~algenta_graph.nodes.arguments`)
  and its executions read back from the engine (:mod:`~algenta_graph.nodes.recovery`);
- :mod:`~algenta_graph.nodes.steps`: reading a step out of the messages, writing its answers.

Neither node module imports the other; none imports the server or the CLI.
"""
