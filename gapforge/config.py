"""The one typed config tree: YAML file + `--set dotted.key=value` overrides +
environment variables (read here and nowhere else).

Each layer owns its section (sandbox/config.py, sandbox/checks/settings.py,
agents/config.py, store/config.py); this module only composes them and loads.
Unknown keys are rejected; every error is one line naming the key and the fix.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gapforge.agents.analysis.config import AnalysisConfig
from gapforge.agents.config import LLMConfig, PolicyConfig, RolloutConfig
from gapforge.agents.router import RoutingConfig
from gapforge.agents.synthesis.config import SynthesisConfig
from gapforge.envs.tau2.config import Tau2Config
from gapforge.errors import ConfigError
from gapforge.evaluation.config import EvaluationConfig
from gapforge.executor.config import ExecutorConfig
from gapforge.pricing import PricingConfig
from gapforge.sandbox.checks.settings import GRPOReadinessConfig
from gapforge.sandbox.config import SandboxConfig
from gapforge.serving.config import ServeConfig
from gapforge.store.config import StoreConfig
from gapforge.store.redact import redact, redact_tree
from gapforge.training.config import TrainingConfig


class GapforgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    workspace: Path = Field(
        Path(".gapforge"),
        description="directory of everything a run writes: store, checkpoints, env code, adapters, reports",
    )
    seed: int = Field(0, description="seed of the local policy's sampling and of the evaluation's bootstrap")
    stages: Literal["real", "fixtures"] = Field(
        "real", description="real, or fixtures: the tests' fake stages (tests/fakes/fake_stages.py)"
    )
    store: StoreConfig = Field(default_factory=StoreConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    rollouts: RolloutConfig = Field(default_factory=RolloutConfig)
    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig)
    synthesis: SynthesisConfig = Field(default_factory=SynthesisConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    grpo_readiness: GRPOReadinessConfig = Field(default_factory=GRPOReadinessConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    tau2: Tau2Config = Field(default_factory=Tau2Config)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    serving: ServeConfig = Field(default_factory=ServeConfig)
    pricing: PricingConfig = Field(default_factory=PricingConfig)

    @model_validator(mode="after")
    def _across_sections(self) -> GapforgeConfig:
        """Settings of two sections that must agree (one-line fixes)."""
        if self.policy.kind == "local" and not self.policy.local_path:
            raise ValueError("policy.kind=local needs policy.local_path: set it to a Hugging Face model directory")
        return self

    @property
    def store_url(self) -> str:
        return self.store.url or f"sqlite:///{(self.workspace / 'gapforge.db').resolve()}"

    @property
    def checkpoint_path(self) -> Path:
        return self.workspace / "checkpoints.sqlite"

    def dump(self) -> dict[str, Any]:
        """The effective config as plain data, secrets excluded: keys are never fields, and the
        password of any URL (store.url, an endpoint's base_url) is masked."""
        return redact_tree(self.model_dump(mode="json"))


def check_run_config(cfg: GapforgeConfig) -> None:
    """What a whole graph run needs beyond a valid tree, checked before its first stage (one line: what to set).
    A run trains adapters, routes and evaluates on the base model's weights, so it needs them on this machine."""
    pol = cfg.policy
    if pol.kind == "scripted":
        raise ConfigError(
            "policy.kind=scripted cannot be trained: a run trains LoRA adapters on the base policy; set policy.kind=local "
            "and policy.local_path=DIR (or policy.kind=endpoint and policy.local_path = the weights the server serves)"
        )
    if not pol.local_path:
        raise ConfigError(
            "policy.kind=endpoint: set policy.local_path to the weights the server serves (training and routing load them here)"
        )
    if pol.kind == "endpoint" and cfg.routing.backend == "transformers":
        raise ConfigError(
            "routing.backend=transformers needs the policy in this process, but policy.kind=endpoint serves it "
            "elsewhere: set routing.backend=vllm (or gate)"
        )


_ENV_OVERRIDES = {
    "GAPFORGE_WORKSPACE": "workspace",
    "GAPFORGE_STORE_URL": "store.url",
    "GAPFORGE_LLM_BASE_URL": "llm.endpoint.base_url",
    "GAPFORGE_LLM_MODEL": "llm.endpoint.model",
    "GAPFORGE_POLICY_BASE_URL": "policy.endpoint.base_url",
    "GAPFORGE_POLICY_MODEL": "policy.endpoint.model",
    "TAU2_DATA_DIR": "tau2.data_dir",  # τ²-bench's own variable
}


_BREAKER = "constants: BREAKER_FAILURES = 8, BREAKER_COOLDOWN_S = 30.0 (agents/llm.py, serving/openai_policy.py)"
# Keys that went (issue 62) -> what replaced them: given anyway, they are refused in one line that says so.
REMOVED = {
    "evaluation.baseline_grpo": "list baseline_grpo_target in evaluation.comparisons (listed by default)",
    "evaluation.baseline_gepa": "list gepa in evaluation.comparisons",
    "evaluation.scaling_curve": "list rollout_scaling in evaluation.comparisons",
    "evaluation.all_tasks_greedy": "list paper_protocol in evaluation.comparisons",
    "routing.max_example_chars": "fixed: 1200 characters of each capability's example in the routing prompt",
    "evaluation.gepa_minibatch": "fixed: 3 analysis tasks per GEPA reflection step (GEPA_MINIBATCH, evaluation/gepa_baseline.py)",
    "routing.max_policy_chars": "fixed: 600 characters of the target's policy (MAX_POLICY_CHARS, agents/router/router.py)",
    **{f"{s}.endpoint.{k}": _BREAKER for s in ("llm", "policy") for k in ("breaker_failures", "breaker_cooldown_s")},
    **{
        f"routing.{k}": f"the label scorer (routing.backend=vllm) reads policy.endpoint.{v}"
        for k, v in (("vllm_base_url", "base_url"), ("vllm_model", "model"), ("timeout_s", "timeout_s"))
    },
}


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {dotted}: '{key}' is a value, not a section")
        node = child
    node[keys[-1]] = value


def parse_override(item: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", parsed value); the value is parsed as YAML (numbers, bools, lists)."""
    if "=" not in item:
        raise ConfigError(f"--set '{item}': expected dotted.key=value, e.g. --set rollouts.concurrency=16")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set '{item}': the key before '=' is empty")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def _format_error(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "<root>"
    if not first["loc"] and first["type"] == "value_error":  # a check across sections: its message says what to set
        return str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden" and loc in REMOVED:
        return f"config key '{loc}' was removed: {REMOVED[loc]}"
    if first["type"] == "extra_forbidden":
        return f"unknown config key '{loc}': remove it or check the spelling (see `gapforge config show`)"
    return redact(f"config key '{loc}': {first['msg']} (got {first.get('input')!r})")


def read_secret(var: str, environ: dict[str, str] | None = None) -> str:
    """A secret from the env var the user named on the command line (e.g. `serve --api-key-env`):
    the loader's one other read of the environment."""
    value = (os.environ if environ is None else environ).get(var)
    if not value:
        raise ConfigError(
            f"env var {var} is not set or empty: export {var}=... (the secret itself never goes on the command line)"
        )
    return value


class _UniqueKeys(yaml.SafeLoader):
    """SafeLoader refusing a key given twice in one mapping: plain YAML keeps the last, silently losing the first section."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"{key!r} given twice", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None, environ: dict[str, str] | None = None
) -> GapforgeConfig:
    """Load YAML (optional), apply env var overrides, then `--set` overrides, validate."""
    env = os.environ if environ is None else environ
    tree: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file '{p}' not found: pass an existing YAML file to --config")
        try:
            loaded = yaml.load(p.read_text(encoding="utf-8"), Loader=_UniqueKeys) or {}  # a SafeLoader
        except UnicodeDecodeError as e:
            raise ConfigError(
                f"config file '{p}' is not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}): save it as UTF-8"
            ) from None
        except OSError as e:
            raise ConfigError(f"config file '{p}' cannot be read ({e.strerror}): check its permissions") from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where, problem = f" line {mark.line + 1}" if mark else "", getattr(e, "problem", None)
            raise ConfigError(
                f"config file '{p}'{where} is not valid YAML{f' ({problem})' if problem else ''}: fix it"
            ) from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file '{p}' must hold a mapping of sections at the top level")
        tree = loaded
    for var, dotted in _ENV_OVERRIDES.items():
        if env.get(var):
            _set_dotted(tree, dotted, env[var])
    for item in overrides or []:
        key, value = parse_override(item)
        _set_dotted(tree, key, value)
    for section in ("llm", "policy"):
        ep = tree.get(section, {}).get("endpoint", {}) if isinstance(tree.get(section), dict) else {}
        if isinstance(ep, dict) and "api_key" in ep:
            raise ConfigError(
                f"{section}.endpoint.api_key: secrets are read from env vars only; set {ep.get('api_key_env') or 'OPENAI_API_KEY'} instead"
            )
    try:
        cfg = GapforgeConfig.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(_format_error(e)) from None
    for section, ep in (("llm", cfg.llm.endpoint), ("policy", cfg.policy.endpoint)):
        ep.load_key(env)
        refusal = ep.key_refusal()
        if refusal:
            raise ConfigError(f"{section}.endpoint: {refusal.replace('endpoint.', section + '.endpoint.')}")
    return cfg
