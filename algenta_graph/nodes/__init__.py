"""The governed graph's nodes, each in its own module, over shared step helpers.

- :mod:`~algenta_graph.nodes.agent`: ``retrieve_tools`` and ``model``;
- :mod:`~algenta_graph.nodes.governed_tool`: ``governed_tool`` and the routing of a step;
- :mod:`~algenta_graph.nodes.denial_handler`: one ``denial_handler_<gate>`` per gate;
- :mod:`~algenta_graph.nodes.answers`: what an operator is asked, and what an answer may be;
- :mod:`~algenta_graph.nodes.executor`: the execution of a decision (model path, recovery,
  operator path), held by both node kinds;
- :mod:`~algenta_graph.nodes.steps`: reading a step out of the messages, writing its answers.

Neither node module imports the other; none imports the server or the CLI.
"""
