"""What the inbox's tests share: its session cookie, and the served inbox its browser tests drive.

- :data:`COOKIE` and :func:`cookie_decodings` (the unit, served and browser tiers);
- :func:`served`: ``langgraph dev`` with the repository's ``langgraph.json`` (its ``http.app`` is
  the inbox), a tokens file of :data:`TOKENS`, checkpoints in a SQLite file and an
  ``ALGENTA_CONFIG`` file of the test's settings (:func:`served_files` writes them, for any
  number of servers and checkpoints elsewhere); the pages' own helpers (:func:`submit`,
  :func:`queue_ids`, :func:`none_shown`) and the README's screenshots (:func:`screenshot`).

Selenium is imported where a helper drives a browser, so the unit tier imports this module
without it.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import shutil
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from browser_support import unstale, wait_for
from repo_paths import REPO
from served_support import CONFIG, langgraph_dev, write_auth_file

from algenta_graph.engine import ReferenceEngine
from algenta_graph.serving.auth import ENV_AUTH_FILE

COOKIE = "algenta_inbox"
"""The inbox's session cookie."""


def cookie_decodings(cookie: str) -> list[bytes]:
    """``cookie`` and every part of it decoded as a signed cookie's payload decodes (base64url,
    then zlib when compressed): what anyone holding the cookie reads without a key."""
    found = [cookie.encode()]
    for part in cookie.lstrip(".").split("."):
        try:
            raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        except (binascii.Error, ValueError):
            continue
        found.append(raw)
        with suppress(zlib.error):
            found.append(zlib.decompress(raw))
    return found


# ---------------------------------------------------------------------------------------------
# the served inbox, for the browser tests


TOKENS: dict[str, tuple[str, list[str]]] = {
    "tok-alice": ("alice", ["agent"]),
    "tok-ana": ("ana", ["operator"]),
    "tok-olga": ("olga", ["operator"]),
    "tok-gus": ("gus", ["operator:risk_floor"]),
    "tok-audrey": ("audrey", ["auditor"]),
}
SERVER_CHECKPOINTER = "algenta_graph.serving.checkpointer.server_checkpointer"
DOCS = REPO / "docs"
SCREENSHOTS = "ALGENTA_SCREENSHOTS"
"""Set to ``1`` to write the README's screenshots (``docs/inbox-*.png``) from this run."""


def screenshot(driver: Any, tmp_path: Path, name: str) -> Path:
    """Save a screenshot in ``tmp_path``, and into ``docs/`` when ``ALGENTA_SCREENSHOTS=1``."""
    path = tmp_path / name
    assert driver.save_screenshot(str(path)), name
    if os.environ.get(SCREENSHOTS) == "1":
        shutil.copyfile(path, DOCS / name)
    return path


REQUIRED_REASONS = '[escalation]\nrequire_reason = true\nexpires_after = {confidence = "PT4H"}\n'


def served_files(
    engine: ReferenceEngine,
    tmp_path: Path,
    settings_toml: str = REQUIRED_REASONS,
    *,
    checkpoints: str | None = None,
    **more_env: str,
) -> tuple[Path, dict[str, str]]:
    """What :func:`served` serves: ``(langgraph.json, environment)``, written in ``tmp_path``.

    ``checkpoints`` is ``ALGENTA_CHECKPOINTER`` (default: ``checkpoints.sqlite`` there); any
    number of ``langgraph dev`` processes may serve the same two.
    """
    config = json.loads(CONFIG.read_text())
    assert config["http"]["app"] == "algenta_graph.inbox.app:app"  # the repository's own
    config["checkpointer"] = {"path": SERVER_CHECKPOINTER}
    config.pop("env", None)
    path = tmp_path / "langgraph.json"
    path.write_text(json.dumps(config))
    settings = tmp_path / "algenta.toml"  # by default a deadline on confidence, reasons required
    settings.write_text(settings_toml)
    env = {
        "ALGENTA_CONFIG": str(settings),
        "ALGENTA_BASE_URL": engine.url,
        "ALGENTA_OPERATOR_KEY_IS_AGENT_KEY": "1",  # the reference engine here has no keys
        "ALGENTA_PROFILE": "execute",
        "ALGENTA_MODEL": "demo",
        "ALGENTA_CHECKPOINTER": checkpoints or str(tmp_path / "checkpoints.sqlite"),
        "ALGENTA_INBOX_SECRET": "browser-test-secret",
        ENV_AUTH_FILE: str(write_auth_file(tmp_path / "auth.json", TOKENS)),
        **more_env,
    }
    return path, env


@contextmanager
def served(
    engine: ReferenceEngine,
    tmp_path: Path,
    settings_toml: str = REQUIRED_REASONS,
    *,
    extra_args: tuple[str, ...] = (),
    **more_env: str,
) -> Iterator[tuple[Any, Path]]:
    """``langgraph dev`` serving the inbox with ``settings_toml`` as its ``ALGENTA_CONFIG`` file
    (``extra_args`` to the command, ``more_env`` to its environment): ``(server, checkpoints)``."""
    path, env = served_files(engine, tmp_path, settings_toml, **more_env)
    db = Path(env["ALGENTA_CHECKPOINTER"])
    with langgraph_dev(path, workdir=tmp_path / "server", env=env, extra_args=extra_args) as server:
        yield server, db


def by_id(driver: Any, element_id: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, element_id)


def queue_ids(driver: Any) -> list[str]:
    """The queue's escalation ids, read in one step of the page (the queue refreshes itself:
    rows found one call and read the next may have been replaced in between)."""
    ids = driver.execute_script(
        "return Array.from(document.querySelectorAll('#queue tr.entry'),"
        " r => r.getAttribute('data-escalation'));"
    )
    return [str(i) for i in ids]


def submit(driver: Any, *, decision: str | None, reason: str = "", **edit: str) -> str:
    """Fill the escalation form and send it; the page's error (or notice) text."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By

    if decision:
        by_id(driver, f"decision-0-{decision}").click()
    box = by_id(driver, "reason-0")
    box.clear()
    if reason:
        box.send_keys(reason)
    for name, value in edit.items():
        driver.execute_script(
            "document.getElementById(arguments[0]).value = arguments[1];", f"edit-0-{name}", value
        )
    # the form posts and the answer is a new page: wait for this one to go first, or a second
    # submit would read the first one's #error just before the page under it is replaced
    page = driver.find_element(By.TAG_NAME, "html")

    def replaced(_: Any) -> bool:
        # selenium's staleness_of, also taking the answer Chromium sometimes gives for a node
        # of a document being replaced (an "unhandled inspector error" in a CI run of 4c6a291)
        try:
            page.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as e:
            if "does not belong to the document" not in str(e):
                raise
            return True
        return False

    by_id(driver, "submit").click()
    wait_for(driver, replaced)
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#error, #notice"))
    return str(unstale(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#error, #notice").text))


NONE = re.compile(r"\bNone\b")


def none_shown(driver: Any) -> list[str]:
    """Every line of the page's visible text that shows Python's ``None`` (a field the page
    failed to put in words)."""
    from selenium.webdriver.common.by import By

    text = str(driver.find_element(By.TAG_NAME, "body").text)
    return [line for line in text.splitlines() if NONE.search(line)]
