"""Model strings after a plain install: langchain at runtime, a clear error per missing package."""

from __future__ import annotations

import sys

import pytest
from ci_support import require_module
from repo_paths import REPO

from algenta_graph.errors import AlgentaGraphError, ModelPackageMissingError, ModelSetupError
from algenta_graph.models import PROVIDER_PACKAGES, resolve_model

ROOT = REPO


def _pyproject() -> dict[str, object]:
    tomllib = pytest.importorskip("tomllib")
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text()))


def test_langchain_is_a_runtime_dependency_and_providers_are_dev_only() -> None:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    runtime = [d.split(">")[0].split("[")[0].strip() for d in project["dependencies"]]
    assert "langchain" in runtime  # init_chat_model must import after a plain install
    assert "langchain-openai" not in runtime and "langchain-anthropic" not in runtime
    dev = " ".join(project["optional-dependencies"]["dev"])
    assert "langchain-openai" in dev and "langchain-anthropic" in dev


def test_a_provider_whose_package_is_not_installed_names_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # None in sys.modules makes the import fail exactly as a missing package does
    monkeypatch.setitem(sys.modules, "langchain_mistralai", None)
    with pytest.raises(ModelPackageMissingError) as info:
        resolve_model("mistralai:mistral-large-latest")
    err = info.value
    assert err.package == "langchain-mistralai"
    assert "pip install langchain-mistralai" in str(err)
    assert isinstance(err, ImportError) and isinstance(err, AlgentaGraphError)


def test_a_really_missing_provider_package_names_the_package() -> None:
    import importlib.util

    missing = [
        (p, pkg)
        for p, pkg in PROVIDER_PACKAGES.items()
        if importlib.util.find_spec(pkg.replace("-", "_")) is None
    ]
    if not missing:
        pytest.skip("every known provider package is installed here")
    provider, package = missing[0]
    with pytest.raises(ModelPackageMissingError, match=f"pip install {package}"):
        resolve_model(f"{provider}:some-model")


def test_openai_and_anthropic_strings_resolve_with_their_packages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require_module("langchain_openai")
    require_module("langchain_anthropic")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-used")
    openai = resolve_model("openai:gpt-5")
    anthropic = resolve_model("anthropic:claude-sonnet-4-5")
    assert type(openai).__name__ == "ChatOpenAI" and openai.model_name == "gpt-5"  # type: ignore[attr-defined]
    assert type(anthropic).__name__ == "ChatAnthropic"
    assert anthropic.model == "claude-sonnet-4-5"  # type: ignore[attr-defined]


def test_missing_credentials_and_unknown_providers_are_model_setup_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require_module("langchain_openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_ADMIN_KEY", raising=False)
    with pytest.raises(ModelSetupError, match="OPENAI_API_KEY") as info:
        resolve_model("openai:gpt-5")
    assert "'openai:gpt-5'" in str(info.value)
    assert not isinstance(info.value, ModelPackageMissingError)
    with pytest.raises(ModelSetupError, match="no-such-provider:x"):
        resolve_model("no-such-provider:x")
