"""Reading a configuration: a mapping, a TOML / JSON file, and the ``ALGENTA_*`` variables."""

from __future__ import annotations

import difflib
import json
import os
import sys
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from algenta_graph.config.agent import AgentConfig
from algenta_graph.config.names import (
    _TRANSPORTS,
    ENV_CAPTURE_CONTENT,
    ENV_CONFIG,
    ENV_ON_DENIAL,
    ENV_VARIABLES,
    NO_ENGINE_WORDS,
)
from algenta_graph.errors import ConfigError, ConfigProblem
from algenta_graph.governance.gates import parse_on_denial

if TYPE_CHECKING:
    pass


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    """The pydantic models a field's type holds (in a union, a list, a dict's values)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _nearest_key(loc: Sequence[str]) -> str | None:
    """The valid key nearest to an unknown one, following ``loc`` through the models' fields.

    A part of ``loc`` that is no field (a table's own key, a list index, a union's tag) keeps
    the models reached so far; the last part is the unknown key.
    """
    models: list[type[BaseModel]] = [AgentConfig]
    for part in loc[:-1]:
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if fields:
            models = [m for f in fields for m in _models_in(f.annotation)]
    names = {
        name
        for model in models
        for key, info in model.model_fields.items()
        for name in (key, info.alias)
        if name
    }
    found = difflib.get_close_matches(loc[-1], sorted(names), n=1) if loc else []
    return found[0] if found else None


def _problems(exc: ValidationError, source_of: Callable[[str], str]) -> list[ConfigProblem]:
    out: list[ConfigProblem] = []
    for error in exc.errors():
        loc = [str(p) for p in error["loc"]]
        # a discriminated union names the member in the location: extra_servers.crm.sse.url
        if len(loc) >= 3 and loc[0] == "extra_servers" and loc[2] in _TRANSPORTS:
            del loc[2]
        key = ".".join(loc) or "(top level)"
        message = str(error["msg"])
        if error["type"] == "extra_forbidden":
            nearest = _nearest_key(loc)
            message = "unknown key" + (f"; did you mean {nearest}?" if nearest else "")
        elif message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        out.append(ConfigProblem(source_of(loc[0] if loc else ""), key, message))
    return out


def parse_config(
    data: Mapping[str, Any],
    *,
    source: str = "the configuration",
    sources: Mapping[str, str] | None = None,
) -> AgentConfig:
    """Validate a mapping (a parsed file) into an :class:`AgentConfig`.

    Args:
        data: the configuration's keys and values.
        source: how problems name where ``data`` came from (a file path).
        sources: ``{top-level key: source}`` for keys that came from elsewhere (an
            environment variable).

    Raises:
        ConfigError: every problem, one line each, naming its source and key.
    """
    by_key = dict(sources or {})

    def source_of(key: str) -> str:
        return by_key.get(key, source)

    if not isinstance(data, Mapping):
        raise ConfigError([ConfigProblem(source, "(top level)", "must be a table of keys")])
    try:
        config = AgentConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(_problems(exc, source_of)) from None
    config._sources = {"": source, **{k: source_of(k) for k in data}}
    return config


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The keys of a TOML (``.toml``) or JSON (``.json``) configuration file.

    Raises:
        ConfigError: the file is missing, unreadable, not TOML / JSON, or not a table.
    """
    where = str(path)
    suffix = Path(path).suffix.lower()
    if suffix not in (".toml", ".json"):
        raise ConfigError(
            [ConfigProblem(where, "(file)", "a configuration file ends in .toml or .json")]
        )
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError([ConfigProblem(where, "(file)", "no such file")]) from None
    except OSError as exc:
        raise ConfigError([ConfigProblem(where, "(file)", f"cannot be read ({exc})")]) from None
    try:
        text = raw.decode("utf-8")
        data: Any = _toml_loads(text) if suffix == ".toml" else json.loads(text)
    except UnicodeDecodeError:
        raise ConfigError([ConfigProblem(where, "(file)", "is not UTF-8 text")]) from None
    except json.JSONDecodeError as exc:
        message = f"is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        raise ConfigError([ConfigProblem(where, "(file)", message)]) from None
    except ValueError as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise ConfigError([ConfigProblem(where, "(file)", f"is not valid TOML: {exc}")]) from None
    if not isinstance(data, dict):
        raise ConfigError([ConfigProblem(where, "(top level)", "must be a table (an object)")])
    return data


def _toml_loads(text: str) -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise ValueError(
                "reading TOML on Python 3.10 needs tomli (pip install tomli), or use JSON"
            ) from None
    return tomllib.loads(text)


def _env_overrides(
    environ: Mapping[str, str], problems: list[ConfigProblem]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The values the ``ALGENTA_*`` variables set (typed), and ``{key: its variable}``."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def text(key: str) -> str | None:
        raw = environ.get(ENV_VARIABLES[key], "").strip()
        if raw:
            sources[key] = f"environment variable {ENV_VARIABLES[key]}"
        return raw or None

    for key in ("base_url", "profile", "model"):
        raw = text(key)
        if raw is not None:
            values[key] = raw
    if str(values.get("base_url", "")).lower() in NO_ENGINE_WORDS:
        values["base_url"] = False  # no engine, as the file's base_url = false says
    for key in ("api_key", "operator_api_key", "ledger"):
        if text(key) is not None:
            values[key] = {"env": ENV_VARIABLES[key]}
    flag = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
    for key in ("single_process", "operator_key_is_agent_key"):
        raw = text(key)
        if raw is None:
            continue
        if raw.lower() in flag:
            values[key] = flag[raw.lower()]
        else:
            problems.append(ConfigProblem(sources[key], key, f"must be 1 or 0, not {raw!r}"))
    raw = environ.get(ENV_CAPTURE_CONTENT, "").strip()
    if raw:
        capture = {"span_only": True, "span_and_event": True, "true": True, "1": True}
        capture |= {"no_content": False, "false": False, "0": False}
        sources["telemetry"] = f"environment variable {ENV_CAPTURE_CONTENT}"
        if raw.lower() in capture:
            values["telemetry"] = {"capture_content": capture[raw.lower()]}
        else:
            problems.append(
                ConfigProblem(
                    sources["telemetry"],
                    "telemetry.capture_content",
                    f"must be SPAN_ONLY, SPAN_AND_EVENT, NO_CONTENT, true or false, not {raw!r}",
                )
            )
    raw = text("top_k")
    if raw is not None:
        try:
            values["top_k"] = int(raw)
        except ValueError:
            problems.append(
                ConfigProblem(sources["top_k"], "top_k", f"must be an integer >= 1, not {raw!r}")
            )
    raw = text("on_denial")
    if raw is not None:
        try:
            values["on_denial"] = parse_on_denial(raw, ENV_ON_DENIAL)
        except ValueError as exc:
            message = str(exc).removeprefix(f"{ENV_ON_DENIAL}: ")
            problems.append(ConfigProblem(sources["on_denial"], "on_denial", message))
    return values, sources


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> AgentConfig:
    """The configuration from a file and the environment (the environment wins).

    Args:
        path: the TOML or JSON file; default the file ``ALGENTA_CONFIG`` names, else none (the
            defaults and the environment).
        environ: the environment to read (default ``os.environ``).

    Raises:
        ConfigError: every problem (the file, each key, each ``ALGENTA_*`` variable), one
            line each.
    """
    env = os.environ if environ is None else environ
    if path is None:
        path = env.get(ENV_CONFIG, "").strip() or None
    data = read_config_file(path) if path is not None else {}
    problems: list[ConfigProblem] = []
    overrides, sources = _env_overrides(env, problems)
    source = str(path) if path is not None else "the configuration"
    try:
        merged = {**data, **overrides}
        if isinstance(data.get("telemetry"), dict) and "telemetry" in overrides:
            merged["telemetry"] = {**data["telemetry"], **overrides["telemetry"]}
        config = parse_config(merged, source=source, sources=sources)
    except ConfigError as exc:
        problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return config
