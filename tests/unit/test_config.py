"""The one configuration (``algenta_graph.config``): files, the environment, every problem named.

In-process, no server: TOML and JSON files, the ``ALGENTA_*`` variables winning over them, one
line per problem naming its source and key (unknown keys, wrong types, literal secrets, import
paths, missing secrets), what resolving fills in, what ``masked`` shows, and the served
factory's settings and operator rule.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel

from algenta_graph.config import (
    DEFAULT_STEP_LIMIT,
    DEFAULT_SYSTEM_PROMPT,
    DEFAULT_TOP_K,
    AgentConfig,
    ConfigError,
    EnvSecret,
    HttpServer,
    load_config,
    masked,
    parse_config,
    read_config_file,
    resolve_config,
)
from algenta_graph.governance.gates import GATE_NAMES
from algenta_graph.graph import build_governed_graph
from algenta_graph.models import DemoChatModel
from algenta_graph.testing import ScriptedChatModel

FULL_TOML = """
# a commented file, as docs/CONFIGURATION.md shows it
base_url = "http://engine.internal:8000/mcp"
api_key = { env = "ENGINE_KEY" }
profile = "execute"
model = "demo"
top_k = 3
on_denial = { confidence = "halt" }
system_prompt = "Be brief."
step_limit = 30
connect_timeout = 5
call_timeout = 20.5
always_include = ["get_contract"]

[extra_servers.crm]
transport = "streamable_http"
url = "https://crm.example/mcp"
headers = { Authorization = { env = "CRM_TOKEN", prefix = "Bearer " }, X-Team = "ops" }

[extra_servers.files]
transport = "stdio"
command = "files-mcp"
args = ["--root", "/srv"]
env = { FILES_API_KEY = { env = "FILES_KEY" } }

[usage]
weight = 0.8
"""

SECRETS = {"ENGINE_KEY": "engine-s3cret", "CRM_TOKEN": "crm-s3cret", "FILES_KEY": "files-s3cret"}


def _problems(exc: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    return [str(p) for p in exc.value.problems]


def test_the_defaults_are_the_factorys_defaults() -> None:
    config = AgentConfig()
    assert (config.top_k, config.step_limit, config.system_prompt) == (
        DEFAULT_TOP_K,
        DEFAULT_STEP_LIMIT,
        DEFAULT_SYSTEM_PROMPT,
    )
    assert config.profile == "observe" and config.model is None and config.usage is None
    assert inspect.signature(build_governed_graph).parameters["top_k"].default == config.top_k


def test_a_toml_file_and_the_same_json_file_give_one_configuration(tmp_path: Path) -> None:
    toml = tmp_path / "agent.toml"
    toml.write_text(FULL_TOML)
    from_toml = load_config(toml, environ={})
    as_json = tmp_path / "agent.json"
    as_json.write_text(json.dumps(read_config_file(toml)))
    assert load_config(as_json, environ={}) == from_toml
    crm = from_toml.extra_servers["crm"]
    assert isinstance(crm, HttpServer)
    assert crm.headers["Authorization"] == EnvSecret(env="CRM_TOKEN", prefix="Bearer ")
    assert from_toml.on_denial == {"confidence": "halt"}
    assert from_toml.usage is not None and from_toml.usage.weight == 0.8
    assert from_toml.call_timeout == 20.5 and from_toml.connect_timeout == 5.0
    assert from_toml.source_of("top_k") == str(toml)


def test_the_environment_variables_win_over_the_file_and_say_so(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('top_k = 3\nprofile = "govern"\nmodel = "demo"\n')
    env = {
        "ALGENTA_CONFIG": str(path),
        "ALGENTA_TOP_K": "7",
        "ALGENTA_ON_DENIAL": "report",
        "ALGENTA_API_KEY": "k-1",
        "ALGENTA_BASE_URL": "http://e:1/mcp",
    }
    config = load_config(environ=env)
    assert (config.top_k, config.profile) == (7, "govern")
    assert config.on_denial == dict.fromkeys(GATE_NAMES, "report")
    assert config.api_key == EnvSecret(env="ALGENTA_API_KEY")  # the name, never the value
    assert config.source_of("top_k") == "environment variable ALGENTA_TOP_K"
    assert config.source_of("profile") == str(path)
    assert resolve_config(config, environ=env).api_key == "k-1"
    # no file at all: the environment alone
    assert load_config(environ={"ALGENTA_PROFILE": "execute"}).profile == "execute"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("top_k = 3\nretrieval_depth = 9\n", "retrieval_depth: unknown key"),
        ('top_k = "five"\n', "top_k: Input should be a valid integer"),
        ("top_k = 0\n", "top_k: Input should be greater than or equal to 1"),
        ("step_limit = 3\n", "step_limit: Input should be greater than or equal to 4"),
        ("connect_timeout = true\n", "connect_timeout: Input should be a valid number"),
        ('profile = "root"\n', "profile: unknown Algenta tool profile 'root'"),
        ('base_url = "localhost:8000"\n', "base_url: must be an http(s):// or ws(s):// URL"),
        ('on_denial = { gate9 = "halt" }\n', "on_denial: unknown gate 'gate9'"),
        ('on_denial = "ignore"\n', "on_denial: unknown policy 'ignore'"),
        ('always_include = "get_contract"\n', "always_include: Input should be a valid list"),
        ('embeddings = "my_pkg.embeddings"\n', "embeddings: must be an import path"),
        ("model = 3\n", "model: must be an init_chat_model id"),
        ("[usage]\nweight = -1\n", "usage.weight: Input should be greater than or equal to 0"),
        ("[usage]\nhalf_life = 3\n", "usage.half_life: unknown key"),
        ("[escalation]\ndeadline_seconds = 60\n", "escalation.deadline_seconds: unknown key"),
        ('[telemetry]\nexporters = "otlp"\n', "telemetry.exporters: unknown key"),
        (
            '[telemetry]\nexporter = "jaeger"\n',
            "telemetry.exporter: Input should be 'none' or 'otlp'",
        ),
        (
            '[escalation]\nexpires_after = { confidence = "soon" }\n',
            "escalation.expires_after: confidence: Input should be a valid timedelta",
        ),
        ('api_key = "s3cret"\n', "api_key: a secret is never written into the configuration"),
        (
            '[extra_servers.crm]\ntransport = "sse"\nurl = "http://c/mcp"\n'
            'headers = { Authorization = "Bearer s3cret" }\n',
            "extra_servers.crm.headers: the header 'Authorization' looks like a secret",
        ),
        (
            '[extra_servers.crm]\ntransport = "sse"\nurl = "http://c/mcp"\n'
            'headers = { x-api-key = "s3cret" }\n',
            "extra_servers.crm.headers: the header 'x-api-key' looks like a secret",
        ),
        (
            '[extra_servers.f]\ntransport = "stdio"\ncommand = "f"\nenv = { GITHUB_TOKEN = "g" }\n',
            "extra_servers.f.env: the environment entry 'GITHUB_TOKEN' looks like a secret",
        ),
        (
            '[extra_servers.crm]\ntransport = "streamable_http"\nurl = "http://u:pw@c/mcp"\n',
            "extra_servers.crm.url: a password in the URL is a secret",
        ),
        (
            '[extra_servers.crm]\ntransport = "streamable_http"\nurl = "http://c/mcp?token=x"\n',
            "extra_servers.crm.url: the query parameter 'token' looks like a secret",
        ),
        (
            '[extra_servers.crm]\ntransport = "sse"\nurl = "http://c/mcp"\nverify = 1\n',
            "extra_servers.crm.verify: unknown key",
        ),
        ('[extra_servers.crm]\ntransport = "ftp"\n', "extra_servers.crm: Input tag 'ftp'"),
        (
            '[extra_servers.algenta]\ntransport = "stdio"\ncommand = "x"\n',
            "extra_servers: the server name 'algenta' is reserved",
        ),
        (
            '[extra_servers.crm]\ntransport = "sse"\nurl = "http://c/mcp"\n'
            'headers = { Authorization = { name = "CRM" } }\n',
            "extra_servers.crm.headers.Authorization.env: Field required",
        ),
    ],
)
def test_each_problem_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, text: str, line: str
) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert any(p.startswith(f"{path}: {line}") for p in _problems(caught)), _problems(caught)


def test_every_problem_is_reported_at_once_file_and_environment(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('topk = 3\nprofile = "root"\n')
    env = {"ALGENTA_TOP_K": "many", "ALGENTA_ON_DENIAL": '{"gate9": "halt"}'}
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=env)
    assert _problems(caught) == [
        "environment variable ALGENTA_TOP_K: top_k: must be an integer >= 1, not 'many'",
        "environment variable ALGENTA_ON_DENIAL: on_denial: unknown gate 'gate9'; the gates are "
        "idempotency, confidence, risk_floor, approval, budget, arguments",
        f"{path}: profile: unknown Algenta tool profile 'root'; valid profiles: observe, "
        "govern, execute, full",
        f"{path}: topk: unknown key; did you mean top_k?",
    ]
    assert isinstance(caught.value, ValueError)  # one exception, every line in its message
    assert str(caught.value).splitlines() == _problems(caught)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("agent.yaml", "top_k: 3", "a configuration file ends in .toml or .json"),
        ("missing.toml", None, "no such file"),
        ("agent.toml", "top_k = = 3", "is not valid TOML"),
        ("agent.json", '{"top_k": 3,}', "is not valid JSON"),
        ("agent.json", "[1, 2]", "must be a table"),
    ],
)
def test_a_bad_file_is_named(tmp_path: Path, name: str, content: str | None, message: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"ALGENTA_CONFIG": str(path)})
    [problem] = _problems(caught)
    assert problem.startswith(f"{path}: ") and message in problem


def test_resolving_reads_every_secret_from_the_environment(tmp_path: Path) -> None:
    config = parse_config(read_config_file(_write(tmp_path / "agent.toml", FULL_TOML)))
    resolved = resolve_config(config, environ=SECRETS)
    assert resolved.api_key == "engine-s3cret"
    assert resolved.extra_servers == {
        "crm": {
            "transport": "streamable_http",
            "url": "https://crm.example/mcp",
            "headers": {"Authorization": "Bearer crm-s3cret", "X-Team": "ops"},
        },
        "files": {
            "transport": "stdio",
            "command": "files-mcp",
            "args": ["--root", "/srv"],
            "env": {"FILES_API_KEY": "files-s3cret"},
        },
    }
    assert isinstance(resolved.model, DemoChatModel)
    for secret in SECRETS.values():
        assert secret not in repr(resolved)
    with pytest.raises(ConfigError) as caught:
        resolve_config(config, environ={"CRM_TOKEN": "x"})
    assert _problems(caught) == [
        "the configuration: api_key: the environment variable ENGINE_KEY is not set",
        "the configuration: extra_servers.files.env.FILES_API_KEY: the environment variable "
        "FILES_KEY is not set",
    ]


def test_masked_shows_where_each_secret_comes_from_never_its_value(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path / "agent.toml", FULL_TOML), environ={})
    shown = masked(config, environ={"ENGINE_KEY": "engine-s3cret"})
    text = json.dumps(shown)
    assert "s3cret" not in text
    assert shown["api_key"] == {"env": "ENGINE_KEY", "value": "****"}
    assert shown["extra_servers"]["crm"]["headers"]["Authorization"] == {
        "env": "CRM_TOKEN",
        "prefix": "Bearer ",
        "value": "<not set>",
    }
    assert shown["sources"]["top_k"] == str(tmp_path / "agent.toml")
    assert shown["model"] == "demo"


# ---------------------------------------------------------------------------------------------
# import paths


class Vectors(Embeddings):
    """A tiny offline embedding model (two letters counted)."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [float(text.count("a")) + 1.0, float(text.count("e")) + 1.0]


VECTORS = Vectors()
SCRIPTED = ScriptedChatModel(replies=["hi"])


def make_scripted() -> ScriptedChatModel:
    return ScriptedChatModel(replies=["made"])


def may_answer(identity: str, gate: str, config: Any) -> bool:
    return identity == "ana"


def takes_one(identity: str) -> bool:
    return True


def broken_factory() -> Embeddings:
    raise RuntimeError("no weights here")


def test_import_paths_name_objects_and_factories() -> None:
    here = __name__
    config = parse_config(
        {
            "embeddings": f"{here}:Vectors",
            "authorize_operator": f"{here}:may_answer",
            "model": {"path": f"{here}:make_scripted"},
        }
    )
    resolved = resolve_config(config, environ={})
    assert isinstance(resolved.embeddings, Vectors)
    assert resolved.authorize_operator is may_answer
    assert isinstance(resolved.model, ScriptedChatModel) and resolved.model.replies == ["made"]
    # made once per process: every build of the served graph shares the model's object
    assert resolve_config(config, environ={}).embeddings is resolved.embeddings
    instances = parse_config(
        {"embeddings": f"{here}:VECTORS", "model": {"path": f"{here}:SCRIPTED"}}
    )
    again = resolve_config(instances, environ={})
    assert again.embeddings is VECTORS and again.model is SCRIPTED
    # what the caller passes itself is not resolved
    skipped = resolve_config(config, environ={}, skip={"model", "embeddings"})
    assert skipped.model is None and skipped.embeddings is None


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (
            {"embeddings": "no_such_package.emb:make"},
            "embeddings: cannot import 'no_such_package.emb'",
        ),
        (
            {"embeddings": "json:no_such_thing"},
            "embeddings: 'json' has no attribute 'no_such_thing'",
        ),
        ({"embeddings": "json:dumps"}, "embeddings: json:dumps() failed (TypeError"),
        ({"embeddings": f"{__name__}:broken_factory"}, "failed (RuntimeError: no weights here)"),
        (
            {"embeddings": "json:decoder"},
            "embeddings: json:decoder is a module, not a LangChain Embeddings",
        ),
        (
            {"authorize_operator": f"{__name__}:takes_one"},
            "must be a function (identity, gate, config)",
        ),
        (
            {"model": {"path": f"{__name__}:VECTORS"}},
            "model.path: ",
        ),
        ({"model": "no_such_provider:some-model"}, "model: "),
    ],
)
def test_an_import_path_that_does_not_import_is_named(data: dict[str, Any], line: str) -> None:
    config = parse_config(data, source="agent.toml")
    with pytest.raises(ConfigError) as caught:
        resolve_config(config, environ={})
    [problem] = _problems(caught)
    assert problem.startswith("agent.toml: ") and line in problem, problem


def test_a_model_import_path_must_give_a_chat_model() -> None:
    config = parse_config({"model": {"path": f"{__name__}:VECTORS"}})
    with pytest.raises(ConfigError, match="not a LangChain chat model"):
        resolve_config(config, environ={})
    assert issubclass(ScriptedChatModel, BaseChatModel)


# ---------------------------------------------------------------------------------------------
# the served factory's settings


def test_server_settings_are_the_configuration_and_its_secrets(tmp_path: Path) -> None:
    from algenta_graph.serving.server import ServerSettings

    path = _write(tmp_path / "agent.toml", 'top_k = 2\napi_key = { env = "ENGINE_KEY" }\n')
    env = {"ALGENTA_CONFIG": str(path), "ENGINE_KEY": "k-one-1f3a"}
    first = ServerSettings.from_env(env)
    assert first.top_k == 2 and first == ServerSettings.from_env(dict(env))
    assert hash(first) == hash(ServerSettings.from_env(dict(env)))
    rotated = ServerSettings.from_env({**env, "ENGINE_KEY": "k-two-9c2d"})
    assert rotated != first  # a rotated token is another connection
    assert "k-one-1f3a" not in repr(first) and "k-one-1f3a" not in first.connection_key()
    assert ServerSettings.from_env({"ALGENTA_MODEL": "openai:gpt-5"}).model == "openai:gpt-5"


def test_the_served_operator_rule_can_only_refuse_more(monkeypatch: pytest.MonkeyPatch) -> None:
    from algenta_graph.serving.server import served_rule

    monkeypatch.delenv("ALGENTA_AUTH_FILE", raising=False)  # open: the server's rule allows
    config: Any = {"configurable": {}}
    assert served_rule(None)("bob", "confidence", config) is True
    assert served_rule(may_answer)("bob", "confidence", config) is False
    assert served_rule(may_answer)("ana", "confidence", config) is True


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------------------------
# the documented file


REPO = Path(__file__).resolve().parents[2]


def test_the_documented_commented_file_is_a_valid_configuration_naming_every_key() -> None:
    from algenta_graph.config import ENV_CONFIG, ENV_VARIABLES

    page = (REPO / "docs" / "CONFIGURATION.md").read_text()
    block = re.search(r"```toml\n(.*?)```", page, re.S)
    assert block, "no toml block in docs/CONFIGURATION.md"
    text = block.group(1)
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    config = parse_config(tomllib.loads(text), source="docs/CONFIGURATION.md")
    crm = config.extra_servers["crm"]
    assert isinstance(crm, HttpServer)
    assert crm.headers["Authorization"] == EnvSecret(env="CRM_TOKEN", prefix="Bearer ")
    assert config.usage is not None
    # every key of the configuration is shown (set, or commented out), and every variable
    for key in AgentConfig.model_fields:
        if key not in ("escalation", "telemetry"):  # reserved, described in the prose
            assert re.search(rf"^#? ?{key} = |^\[{key}[.\]]", text, re.M), key
    env_example = (REPO / ".env.example").read_text()
    for name in (ENV_CONFIG, *ENV_VARIABLES.values()):
        assert name in env_example, name
