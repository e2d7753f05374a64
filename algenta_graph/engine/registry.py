"""The rest of the Algenta tool registry, advertised and answered ``not_supported``.

Each tool is advertised with a real description and input schema, and answered with a
``not_supported_in_reference_engine`` error.

The table below is compact on purpose: one line per tool, ``(description, parameters)``, where
``parameters`` is ``"name:type description; ..."``. A ``!`` after the type marks a required
parameter; types are ``str int num bool obj strs objs`` and ``str{a,b}`` for an enum. The names
must match ``registry_tool_names.json`` (the 140-name registry) minus the implemented tools; a
test checks that.

>>> schema = parse_params("dataset_id:str! The dataset.; limit:int Max rows.")
>>> schema["required"], schema["properties"]["limit"]["type"]
(['dataset_id'], 'integer')
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import mcp.types as mt

_TYPES: dict[str, dict[str, Any]] = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "num": {"type": "number"},
    "bool": {"type": "boolean"},
    "obj": {"type": "object"},
    "strs": {"type": "array", "items": {"type": "string"}},
    "objs": {"type": "array", "items": {"type": "object"}},
}
_PARAM = re.compile(
    r"^(?P<name>[a-z_][a-z0-9_]*):(?P<type>[a-z]+)(?:\{(?P<enum>[^}]*)\})?(?P<req>!)?\s*(?P<desc>.*)$"
)


def parse_params(spec: str) -> dict[str, Any]:
    """Compact parameter spec -> JSON Schema object (no additional properties)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        m = _PARAM.match(part)
        if m is None or m["type"] not in _TYPES:
            raise ValueError(f"bad parameter spec {part!r}")
        prop = dict(_TYPES[m["type"]])
        if m["enum"]:
            prop["enum"] = [e.strip() for e in m["enum"].split(",")]
        if m["desc"]:
            prop["description"] = m["desc"].strip()
        properties[m["name"]] = prop
        if m["req"]:
            required.append(m["name"])
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    return schema


# category -> tool -> (description, parameters)
TABLE: dict[str, dict[str, tuple[str, str]]] = {
    "data_onboarding": {
        "onboard_dataset": (
            "Onboard a new dataset from an uploaded file or a registered source so it can be"
            " queried and used to train decision models.",
            "name:str! Dataset name.; source_id:str Registered source to read from.;"
            " file_uri:str URI of an uploaded file.; target_column:str Column to predict.",
        ),
        "list_datasets": (
            "List onboarded datasets with their status, row counts and last training time.",
            "status:str{ready,training,failed} Only datasets in this state.; limit:int Max items.",
        ),
        "get_dataset_status": (
            "Get the onboarding and training status of one dataset, with progress and errors.",
            "dataset_id:str! The dataset.",
        ),
        "retrain_dataset": (
            "Retrain the decision models of a dataset on its latest data.",
            "dataset_id:str! The dataset.; reason:str Why it is retrained (audit).",
        ),
    },
    "data_access": {
        "connect_data": (
            "Connect a data source (database, warehouse, bucket) to the engine with credentials"
            " held by the engine.",
            "kind:str{postgres,snowflake,bigquery,s3,csv}! Source kind.; name:str! Connection"
            " name.; config:obj Connection settings (host, database, bucket...).",
        ),
        "list_data": (
            "List connected data sources and the tables or files each exposes.",
            "kind:str Only sources of this kind.",
        ),
        "get_data_summary": (
            "Summarise a connected table: row count, column statistics, null rates, freshness.",
            "source:str! Connection name.; table:str! Table or file.",
        ),
        "get_data_schema": (
            "Get the column names and types of a connected table or dataset.",
            "source:str! Connection name.; table:str! Table or file.",
        ),
        "refresh_data": (
            "Refresh the engine's cached copy of a connected source from upstream.",
            "source:str! Connection name.; table:str Only this table.",
        ),
        "disconnect_data": (
            "Disconnect a data source and forget its stored credentials.",
            "source:str! Connection name.",
        ),
    },
    "schema_discovery": {
        "register_source": (
            "Register an external source so its schema can be discovered and mapped.",
            "name:str! Source name.; kind:str! Source kind.; uri:str Location of the source.",
        ),
        "list_sources": ("List registered sources and their discovery status.", ""),
        "get_source_schema": (
            "Get the discovered schema (entities, fields, relations) of a registered source.",
            "source_id:str! The source.",
        ),
        "list_connectors": (
            "List configured connectors (SaaS and database integrations) and their health.",
            "kind:str Only connectors of this kind.",
        ),
        "create_connector": (
            "Create a connector to a SaaS application or database.",
            "kind:str! Connector type (e.g. salesforce, hubspot, postgres).; name:str! Name.;"
            " config:obj Connector settings.",
        ),
        "get_connector": ("Get one connector's configuration and health.", "connector_id:str!"),
        "update_connector": (
            "Update a connector's name or settings.",
            "connector_id:str!; name:str New name.; config:obj Settings to change.",
        ),
        "test_connector": (
            "Test a saved connector: authenticate and read one record.",
            "connector_id:str!",
        ),
        "browse_connector": (
            "Browse the objects (tables, entities) a connector exposes.",
            "connector_id:str!; path:str Object path to list under.",
        ),
        "preview_test_connector": (
            "Test connector settings before saving them.",
            "kind:str! Connector type.; config:obj! Settings to test.",
        ),
        "preview_browse_connector": (
            "Browse what unsaved connector settings would expose.",
            "kind:str! Connector type.; config:obj! Settings.; path:str Object path.",
        ),
        "delete_connector": ("Delete a connector.", "connector_id:str!"),
    },
    "repository_intelligence": {
        "get_repository_intelligence_capabilities": (
            "Describe what repository analysis the engine supports (languages, graph queries).",
            "",
        ),
        "create_repository_snapshot": (
            "Snapshot a code repository at a commit for analysis.",
            "repo_url:str! Git URL.; ref:str Branch, tag or commit.",
        ),
        "get_repository_snapshot": (
            "Get a repository snapshot's status and summary.",
            "snapshot_id:str!",
        ),
        "triage_repository": (
            "Triage a repository snapshot: hotspots, risky modules, failing checks.",
            "snapshot_id:str!; focus:str Area to concentrate on.",
        ),
        "create_repository_decision_plan": (
            "Plan a change to a repository (refactor, upgrade, fix) as a governed decision.",
            "snapshot_id:str!; goal:str! What the change should achieve.",
        ),
        "query_repository_graph": (
            "Query the code graph of a snapshot (callers, dependencies, ownership).",
            "snapshot_id:str!; query:str! Graph query.",
        ),
        "simulate_repository": (
            "Simulate the impact of a planned repository change on tests and dependents.",
            "snapshot_id:str!; plan_id:str!",
        ),
        "run_repository_pipeline": (
            "Run the analysis pipeline (build, tests, linters) on a snapshot.",
            "snapshot_id:str!; steps:strs Pipeline steps to run.",
        ),
        "simulate_repository_patch": (
            "Apply a patch to a snapshot in a sandbox and report what breaks.",
            "snapshot_id:str!; patch:str! Unified diff.",
        ),
        "run_repository_fix": (
            "Generate and validate a fix for an issue found in a snapshot.",
            "snapshot_id:str!; issue:str! The issue to fix.",
        ),
        "apply_repository": (
            "Apply a validated plan to the repository (opens a pull request).",
            "snapshot_id:str!; plan_id:str!; branch:str Target branch.",
        ),
    },
    "query_and_ingest": {
        "query_batch": (
            "Run several governed exact queries against connected datasets in one call.",
            "queries:objs! Each {dataset, filters, columns, limit}.",
        ),
        "query_sql_report": (
            "Run a read-only SQL report over connected datasets and return the result table.",
            "sql:str! A SELECT statement.; limit:int Max rows.",
        ),
        "ingest_data": (
            "Ingest rows into a dataset (append or upsert) for later queries and training.",
            "dataset:str! Target dataset.; rows:objs! Rows to write.;"
            " mode:str{append,upsert} Write mode.",
        ),
    },
    "llm_utilities": {
        "list_models": ("List the language and embedding models the engine can route to.", ""),
        "resolve_artifact_bridge": (
            "Resolve an artifact reference (file, table, run output) into readable content.",
            "artifact_ref:str! Artifact reference.",
        ),
        "tokenize": (
            "Tokenize text with a model's tokenizer.",
            "model:str! Model id.; text:str! Text to tokenize.",
        ),
        "count_tokens": (
            "Count the tokens a text or message list takes for a model.",
            "model:str! Model id.; text:str Text.; messages:objs Chat messages.",
        ),
        "chat_completions": (
            "Run a chat completion through the engine's governed model gateway.",
            "model:str! Model id.; messages:objs! Chat messages.; temperature:num; max_tokens:int",
        ),
        "responses": (
            "Create a model response (Responses API style) through the model gateway.",
            "model:str! Model id.; input:str! Prompt or input.; instructions:str",
        ),
        "embeddings": (
            "Compute embedding vectors for texts.",
            "model:str! Embedding model.; input:strs! Texts to embed.",
        ),
        "embedding_similarity": (
            "Score the semantic similarity between a query and candidate texts.",
            "query:str!; candidates:strs!; model:str Embedding model.",
        ),
        "rerank": (
            "Rerank documents by relevance to a query with a reranker model.",
            "query:str!; documents:strs!; top_n:int How many to keep.",
        ),
    },
    "runtime_libraries": {
        "list_runtime_libraries": (
            "List the installed runtime libraries (optimisers, forecasters, solvers).",
            "",
        ),
        "execute_runtime_library": (
            "Execute a function of a runtime library with arguments, sandboxed and audited.",
            "library:str! Library name.; function:str! Function to call.; arguments:obj",
        ),
    },
    "capability_plane": {
        "list_capability_providers": (
            "List capability providers (external services the engine can delegate tasks to).",
            "",
        ),
        "list_capability_bindings": ("List bindings of capabilities to providers.", ""),
        "create_capability_binding": (
            "Bind a capability to a provider with settings.",
            "capability:str!; provider:str!; config:obj",
        ),
        "test_capability_binding": ("Test that a capability binding works.", "binding_id:str!"),
        "discover_capability_binding": (
            "Discover which providers can serve a capability.",
            "capability:str!",
        ),
        "list_capabilities": ("List the capabilities the engine can route tasks to.", ""),
        "get_capability": ("Get one capability's definition and bindings.", "capability:str!"),
        "route_capabilities": (
            "Pick the best capability for a task description.",
            "task:str! What needs doing.; top_k:int",
        ),
        "execute_capability": (
            "Execute a capability through its bound provider.",
            "capability:str!; input:obj! Capability input.",
        ),
        "list_skills": ("List installed agent skills and whether each is enabled.", ""),
        "enable_skill": ("Enable an installed skill.", "skill_id:str!"),
        "disable_skill": ("Disable an installed skill.", "skill_id:str!"),
    },
    "decisions": {
        "product_decision": (
            "Make a product-level decision (pricing, assortment, allocation) from a template.",
            "template:str! Decision template.; inputs:obj! Template inputs.",
        ),
        "product_agent_run": (
            "Start a product agent that works a decision template end to end.",
            "template:str!; goal:str! What the agent should achieve.",
        ),
        "product_optimize": (
            "Optimise decision variables under constraints (e.g. stock levels, budgets).",
            "objective:str! What to maximise or minimise.; variables:objs!; constraints:objs",
        ),
        "product_retrieve": (
            "Retrieve past decisions and outcomes similar to a situation.",
            "query:str! The situation.; top_k:int",
        ),
        "product_forecast": (
            "Forecast a metric (demand, revenue, churn) over a horizon.",
            "metric:str! Metric.; horizon_days:int! Days ahead.; dataset:str",
        ),
        "score": (
            "Score records with a trained decision model (propensity, risk, value).",
            "model_id:str!; records:objs! Records to score.",
        ),
        "batch": (
            "Run a simulation or score over many scenarios in one batch.",
            "operation:str{simulate,score,recommend}!; items:objs!",
        ),
        "compare": (
            "Compare two or more scenarios or actions side by side on value and risk.",
            "scenarios:objs! Scenarios to compare.",
        ),
        "submit_job": (
            "Submit a long-running decision job (large simulation, optimisation) asynchronously.",
            "kind:str! Job kind.; payload:obj! Job input.",
        ),
        "list_jobs": ("List submitted jobs and their states.", "status:str Only this state."),
        "get_job_status": ("Get a job's state and progress.", "job_id:str!"),
        "poll_job": ("Wait briefly for a job to progress and return its state.", "job_id:str!"),
        "get_job_result": ("Get the result of a finished job.", "job_id:str!"),
        "cancel_job": ("Cancel a queued or running job.", "job_id:str!"),
        "test_webhook_delivery": (
            "Send a test payload to a webhook URL to check it can receive executions.",
            "webhook_url:str!",
        ),
    },
    "agent_runtime": {
        "create_agent_run": (
            "Start a governed agent run with a goal and tool profile.",
            "goal:str!; profile:str Tool profile.; inputs:obj",
        ),
        "list_agent_runs": ("List agent runs and their states.", "status:str; limit:int"),
        "get_agent_run": ("Get one agent run's state and result.", "run_id:str!"),
        "get_agent_run_events": ("Get the event stream of an agent run.", "run_id:str!"),
        "get_agent_run_checkpoints": ("List an agent run's checkpoints.", "run_id:str!"),
        "query_agent_run_checkpoints": (
            "Search checkpoints across agent runs by state content.",
            "query:str!; run_id:str",
        ),
        "get_agent_run_mission_events": ("Get an agent run's mission-level events.", "run_id:str!"),
        "query_agent_run_mission_events": (
            "Search mission events across agent runs.",
            "query:str!; run_id:str",
        ),
        "get_agent_run_telemetry": (
            "Get an agent run's telemetry: tokens, latency, tool calls, cost.",
            "run_id:str!",
        ),
        "query_agent_run_telemetry": (
            "Aggregate telemetry across agent runs.",
            "metric:str!; group_by:str",
        ),
        "resume_agent_run": (
            "Resume a paused agent run, optionally with operator input.",
            "run_id:str!; input:obj",
        ),
        "cancel_agent_run": ("Cancel a running agent run.", "run_id:str!"),
        "approve_agent_run": (
            "Approve the pending step of an agent run waiting for a human.",
            "run_id:str!; approver:str!; note:str",
        ),
    },
    "control_plane": {
        "list_deployment_regions": ("List the regions the engine can be deployed to.", ""),
        "get_deployment": ("Get the engine deployment's configuration and health.", ""),
        "create_deployment": (
            "Create an engine deployment in a region.",
            "region:str!; size:str{small,medium,large}",
        ),
        "get_deployment_cost": ("Estimate the running cost of the deployment.", ""),
        "delete_deployment": ("Delete an engine deployment.", "deployment_id:str!"),
        "list_team_members": ("List team members and their roles.", ""),
        "invite_team_member": (
            "Invite someone to the team with a role.",
            "email:str!; role:str{viewer,operator,admin}!",
        ),
        "update_team_member_role": (
            "Change a team member's role.",
            "member_id:str!; role:str{viewer,operator,admin}!",
        ),
        "remove_team_member": ("Remove a team member.", "member_id:str!"),
        "list_devices": ("List devices signed in to the account.", ""),
        "revoke_device": ("Sign a device out.", "device_id:str!"),
        "get_audit_logs": (
            "Read the audit log: who did what, when, with which tool.",
            "since:str ISO time.; actor:str; limit:int",
        ),
        "get_audit_log_artifacts": (
            "Download the artifacts attached to an audit log entry (hash-verified).",
            "entry_id:str!",
        ),
        "get_billing_info": ("Get the plan, credit balance and billing contact.", ""),
        "create_billing_checkout": ("Create a checkout session to buy credits.", "credits:int!"),
        "create_billing_portal": ("Create a billing portal session link.", ""),
        "refresh_credits": ("Refresh the credit balance from billing.", ""),
        "ingest_metering_events": (
            "Record usage metering events for billing.",
            "events:objs! Metering events.",
        ),
        "update_execution_policy": (
            "Change the execution policy (confidence minimum, risk floor); creates a snapshot.",
            "min_confidence:num; risk_floor:num; reason:str! Why (audit).",
        ),
    },
    "observability": {
        "get_runtime_manifest": ("Get the runtime manifest: modules, versions, hashes.", ""),
        "get_runtime_release_validation": (
            "Get the validation report of the running release.",
            "",
        ),
        "get_runtime_modules": ("List runtime modules and their status.", ""),
        "get_runtime_benchmarks": ("Get the runtime's published benchmark results.", ""),
        "get_me": ("Get the calling identity: user, team, role, API key scope.", ""),
        "update_me": ("Update the calling user's profile.", "name:str; timezone:str"),
        "get_limits": ("Get the rate and usage limits that apply to the caller.", ""),
        "list_distributions": ("List the engine distributions (editions) available.", ""),
        "list_templates": ("List decision and agent templates.", "kind:str"),
        "list_api_keys": ("List API keys (ids and scopes, never secrets).", ""),
        "create_api_key": ("Create an API key with a scope.", "name:str!; scope:strs"),
        "revoke_api_key": ("Revoke an API key.", "key_id:str!"),
        "list_runs": ("List recent runs (simulations, jobs, agent runs).", "limit:int"),
        "get_run": ("Get one run with inputs, outputs and timings.", "run_id:str!"),
        "get_analytics": (
            "Get decision analytics: volumes, outcomes, value realised.",
            "since:str; group_by:str",
        ),
        "get_usage": ("Get usage by tool and period.", "since:str; until:str"),
    },
    "decision_memory": {
        "record_outcome": (
            "Record the real-world outcome of a logged decision (realised value, notes).",
            "decision_id:str!; realised_value:num!; notes:str",
        ),
        "delete_decision": (
            "Delete a logged decision that was never executed.",
            "decision_id:str!",
        ),
    },
    "triggers": {
        "register_trigger": (
            "Register a trigger that starts a simulation or agent run on a schedule or event.",
            "name:str!; schedule:str Cron expression.; event:str; action:obj!",
        ),
        "list_triggers": ("List registered triggers.", ""),
        "fire_trigger": ("Fire a trigger now.", "trigger_id:str!"),
        "pause_trigger": ("Pause a trigger.", "trigger_id:str!"),
        "delete_trigger": ("Delete a trigger.", "trigger_id:str!"),
    },
}


@dataclass(frozen=True)
class RegistryTool:
    """One advertised but unimplemented registry tool."""

    name: str
    category: str
    description: str
    input_schema: dict[str, Any]

    def to_mcp(self) -> mt.Tool:
        """The tool as ``tools/list`` advertises it (its category after its description)."""
        return mt.Tool(
            name=self.name,
            description=f"{self.description} [category: {self.category}]",
            inputSchema=self.input_schema,
        )


@cache
def registry_names() -> dict[str, list[str]]:
    """The 140-name registry, by category (``registry_tool_names.json``)."""
    text = resources.files("algenta_graph.engine").joinpath("registry_tool_names.json").read_text()
    return dict(json.loads(text)["categories"])


@cache
def registry_tools() -> dict[str, RegistryTool]:
    """Every table entry as a :class:`RegistryTool`, by name."""
    return {
        name: RegistryTool(name, category, desc, parse_params(params))
        for category, tools in TABLE.items()
        for name, (desc, params) in tools.items()
    }
