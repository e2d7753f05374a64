"""What every module of the deployment matrix shares: the real servers outside the graph.

``parts``: one reference engine, one webhook receiver and one CRM over MCP
(``inflight_crm``) for a module, with its files in a temporary directory; the shapes of the
module all talk to them (every figure is counted per decision or per account).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from deployment_shapes import Parts
from inflight_crm import running_inflight_crm

from algenta_graph.engine import ReferenceEngine, WebhookReceiver


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Parts]:
    root = tmp_path_factory.mktemp("deployments")
    with (
        ReferenceEngine(db=root / "engine.sqlite", relaxed=True) as engine,
        WebhookReceiver(log_path=root / "webhook.jsonl") as webhook,
        running_inflight_crm() as crm,
    ):
        yield Parts(engine, webhook, crm, root)
