"""Resolving a configuration: secrets from the environment, objects from their import paths."""

from __future__ import annotations

import importlib
import inspect
import os
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
)

from algenta_graph.config.agent import AgentConfig
from algenta_graph.config.names import DEMO_MODEL
from algenta_graph.config.tables import EnvSecret, EscalationTable
from algenta_graph.errors import ConfigError, ConfigProblem
from algenta_graph.governance.escalations import (
    EscalationSettings,
)

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langchain_core.language_models import BaseChatModel


def import_object(path: str) -> Any:
    """The object ``"package.module:attribute"`` names (``attribute`` may be dotted).

    Raises:
        ImportError: the module cannot be imported, or has no such attribute (the message
            says which).
    """
    module_name, _, attribute = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # the module's own import failure, whatever it is
        raise ImportError(f"cannot import {module_name!r} ({type(exc).__name__}: {exc})") from exc
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportError(f"{module_name!r} has no attribute {attribute!r}") from None
    return obj


@dataclass(frozen=True)
class ResolvedConfig:
    """A configuration with its secrets read and its Python objects imported.

    What :func:`~algenta_graph.graph.create_governed_agent` builds from; made by
    :func:`resolve_config`. The secrets are never in its ``repr``.
    """

    config: AgentConfig
    api_key: str | None = field(default=None, repr=False)
    """The engine's API token (``None``: not configured)."""
    operator_api_key: str | None = field(default=None, repr=False)
    """The operator path's engine credential (``None``: not configured)."""
    extra_servers: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    """The extra servers as ``langchain-mcp-adapters`` connection dicts, secrets filled in."""
    model: BaseChatModel | None = None
    """The chat model (``None`` when not resolved)."""
    embeddings: Embeddings | None = None
    """The embedding model, or ``None`` (BM25 alone)."""
    authorize_operator: Callable[[str, str, Any], bool] | None = None
    """The configured operator rule, or ``None``."""
    escalation: EscalationSettings = field(default_factory=EscalationSettings, repr=False)
    """The denial handlers' settings (the notification secret read, the hook imported)."""
    ledger: str | None = field(default=None, repr=False)
    """The configured ledger (its secret read), or ``None``: the one the deployment implies."""


_EMBEDDINGS: dict[str, Embeddings] = {}
"""Embedding models by import path: made once per process (the served graph is built once per
event loop and setting; each build reuses the model)."""
_EMBEDDINGS_LOCK = threading.Lock()


def iter_secrets(value: Any, key: str = "") -> Iterator[tuple[str, EnvSecret]]:
    """Every secret of a configuration (or of a part of one): ``(dotted key, EnvSecret)``."""
    if isinstance(value, EnvSecret):
        yield key, value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from iter_secrets(getattr(value, name), f"{key}.{name}" if key else name)
    elif isinstance(value, Mapping):
        for name, item in value.items():
            yield from iter_secrets(item, f"{key}.{name}" if key else str(name))


def _server_dict(server: BaseModel, environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in type(server).model_fields:
        value = getattr(server, name)
        if value is None or (name == "args" and value == []):
            continue
        if isinstance(value, Mapping):
            value = {
                k: (v.value(environ) if isinstance(v, EnvSecret) else v) for k, v in value.items()
            }
        out[name] = value
    return out


def resolve_config(
    config: AgentConfig,
    *,
    environ: Mapping[str, str] | None = None,
    skip: Collection[str] = (),
) -> ResolvedConfig:
    """Read the configuration's secrets and import its objects; every problem at once.

    Args:
        config: the configuration.
        environ: where secrets are read (default ``os.environ``).
        skip: keys not to resolve (``"model"``, ``"embeddings"``, ``"authorize_operator"``):
            the caller passes those objects itself.

    Raises:
        ConfigError: a secret missing from the environment, an import path that does not
            import, an object of the wrong kind, or a model that cannot be made; each naming
            its key and source.
    """
    env = os.environ if environ is None else environ
    problems: list[ConfigProblem] = []

    def problem(key: str, message: str) -> None:
        problems.append(ConfigProblem(config.source_of(key), key, message))

    for key, secret in iter_secrets(config, ""):
        if secret.value(env) is None:
            problem(key, f"the environment variable {secret.env} is not set")
    api_key = config.api_key.value(env) if config.api_key else None
    operator_key = config.operator_api_key.value(env) if config.operator_api_key else None
    servers = {name: _server_dict(s, env) for name, s in config.extra_servers.items()}

    model = None if "model" in skip else _resolve_model(config, problem)
    embeddings = None
    if config.embeddings and "embeddings" not in skip:
        embeddings = _resolve_embeddings(config.embeddings, problem)
    authorize = None
    if config.authorize_operator and "authorize_operator" not in skip:
        authorize = _resolve_rule(config.authorize_operator, problem)
    escalation = _resolve_escalation(config.escalation, env, problem)
    ledger = None
    try:
        ledger = ledger_spec(config, env)
    except ConfigError as exc:
        problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return ResolvedConfig(
        config, api_key, operator_key, servers, model, embeddings, authorize, escalation, ledger
    )


def ledger_spec(config: AgentConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The configured ledger, its secret read (``None``: none configured).

    Raises:
        ConfigError: ``ledger = {env = ...}`` names a variable that is not set.
    """
    setting = config.ledger
    if not isinstance(setting, EnvSecret):
        return setting
    value = setting.value(os.environ if environ is None else environ)
    if value is None or not value.strip():
        raise ConfigError(
            [
                ConfigProblem(
                    config.source_of("ledger"),
                    "ledger",
                    f"the environment variable {setting.env} is not set",
                )
            ]
        )
    return value.strip()


def _resolve_escalation(
    table: EscalationTable, env: Mapping[str, str], problem: Callable[[str, str], None]
) -> EscalationSettings:
    hook: Any = None
    if table.hook is not None:
        try:
            hook = import_object(table.hook)
        except ImportError as exc:
            problem("escalation.hook", str(exc))
        else:
            if not callable(hook):
                problem("escalation.hook", f"{table.hook} is a {type(hook).__name__}, not callable")
                hook = None
    secret = table.notify.secret.value(env) if table.notify is not None else None
    return table.settings(secret=secret, hook=hook)


def _resolve_model(config: AgentConfig, problem: Callable[[str, str], None]) -> Any:
    from langchain_core.language_models import BaseChatModel

    from algenta_graph.models import resolve_model

    setting = config.model
    if setting is None or setting == DEMO_MODEL:
        return resolve_model(None)
    if isinstance(setting, str):
        try:
            return resolve_model(setting)
        except Exception as exc:  # ModelSetupError, ModelPackageMissingError, a provider's
            problem("model", " ".join(str(exc).split()))
            return None
    try:
        obj = import_object(setting.path)
    except ImportError as exc:
        problem("model.path", str(exc))
        return None
    if not isinstance(obj, BaseChatModel) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:
            problem("model.path", f"{setting.path}() failed ({type(exc).__name__}: {exc})")
            return None
    if not isinstance(obj, BaseChatModel):
        problem(
            "model.path",
            f"{setting.path} is a {type(obj).__name__}, not a LangChain chat model "
            "(or a callable returning one)",
        )
        return None
    return obj


def _resolve_embeddings(path: str, problem: Callable[[str, str], None]) -> Embeddings | None:

    with _EMBEDDINGS_LOCK:  # made once, however many builds resolve it at the same time
        if path not in _EMBEDDINGS:
            made = _make_embeddings(path, problem)
            if made is None:
                return None
            _EMBEDDINGS[path] = made
        return _EMBEDDINGS[path]


def _make_embeddings(path: str, problem: Callable[[str, str], None]) -> Embeddings | None:
    from langchain_core.embeddings import Embeddings

    try:
        obj = import_object(path)
    except ImportError as exc:
        problem("embeddings", str(exc))
        return None
    if not isinstance(obj, Embeddings) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:
            problem("embeddings", f"{path}() failed ({type(exc).__name__}: {exc})")
            return None
    if not isinstance(obj, Embeddings):
        problem(
            "embeddings",
            f"{path} is a {type(obj).__name__}, not a LangChain Embeddings (or a callable "
            "returning one)",
        )
        return None
    return obj


def _resolve_rule(
    path: str, problem: Callable[[str, str], None]
) -> Callable[[str, str, Any], bool] | None:
    try:
        obj = import_object(path)
    except ImportError as exc:
        problem("authorize_operator", str(exc))
        return None
    try:
        inspect.signature(obj).bind("identity", "gate", {})
    except TypeError:
        problem(
            "authorize_operator",
            f"{path} must be a function (identity, gate, config) -> bool",
        )
        return None
    except ValueError:  # a builtin without a signature: trusted to take the three arguments
        pass
    return obj  # type: ignore[no-any-return]
