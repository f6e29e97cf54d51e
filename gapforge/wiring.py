"""Composition root: the one place that picks concrete classes from the config
(store, sandbox pool, policy backends, chat models, target envs) and bundles them
into the `agents.deps.StageDeps` that stage services receive."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from gapforge.agents.config import EndpointConfig, credentials_in_url, url_problem
from gapforge.agents.deps import StageDeps
from gapforge.config import GapforgeConfig, PolicyConfig
from gapforge.errors import UsageError
from gapforge.store.redact import redact
from gapforge.store.workspace import Workspace

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from gapforge.envs.protocol import PolicyModel, TargetEnvironment
    from gapforge.sandbox.pool import SandboxPool
    from gapforge.store import Store


def open_store(cfg: GapforgeConfig, *, must_exist: bool = False) -> Store:
    """The run's store; `must_exist`: a missing SQLite store is refused (NoStore), nothing is created."""
    from gapforge.store import Store

    if not must_exist:
        cfg.workspace.mkdir(parents=True, exist_ok=True)
    return Store(cfg.store_url, must_exist=must_exist)


def open_sandbox_pool(cfg: GapforgeConfig, *, size: int | None = None) -> SandboxPool:
    """A warm pool of sandboxes (`sandbox.pool_size`, or `size`); the caller closes it."""
    from gapforge.sandbox.pool import SandboxPool

    return SandboxPool(cfg.sandbox, size=cfg.sandbox.pool_size if size is None else size)


def make_role_chat_model(cfg: GapforgeConfig, role: str = "llm") -> BaseChatModel:
    """The chat model of an LLM role: `llm` (analyst, user simulator), `synthesis` (generator and reviewer:
    the recorded answers of `synthesis.recordings` when llm.kind is scripted) or `policy`."""
    from gapforge.agents.llm import chat_model_from_config

    if role == "policy":
        return chat_model_from_config(cfg.policy, section="policy")
    if role == "synthesis" and cfg.llm.kind == "scripted":
        from gapforge.agents.synthesis.recorded import recorded_synthesis_model

        return recorded_synthesis_model(cfg.synthesis.recordings)
    return chat_model_from_config(cfg.llm, section="llm")


def build_deps(cfg: GapforgeConfig, *, pool_size: int | None = None) -> StageDeps:
    """The typed dependencies object for stage services and graph nodes (store and pool open lazily)."""
    return StageDeps(
        open_store=lambda: open_store(cfg),
        open_pool=lambda: open_sandbox_pool(cfg, size=pool_size),
        policy_factory=lambda pol: make_policy(pol or cfg.policy),
        chat_model_factory=lambda role: make_role_chat_model(cfg, role),
        sandbox=cfg.sandbox,
        rollouts=cfg.rollouts,
        readiness=cfg.grpo_readiness.with_temperature(cfg.training.temperature),  # it samples as GRPO will
        policy=cfg.policy,
        synthesis=cfg.synthesis,
        unseen_env=cfg.evaluation.unseen_env,
        workspace=Workspace(cfg.workspace),
        sandbox_checks=sandbox_checks(cfg),  # None: this machine's sandbox; executor.kind ray: a Docker node's
    )


def apply_policy_spec(cfg: GapforgeConfig, spec: str | None) -> PolicyConfig:
    """`--policy` shorthand -> policy config: an http(s) URL (OpenAI-compatible
    endpoint), a local model directory, or `scripted[:ANSWERS_FILE]`."""
    pol = cfg.policy.model_copy(deep=True)
    if spec is None:
        return pol
    if spec.startswith(("http://", "https://")):
        if credentials_in_url(spec):
            raise UsageError(
                f"--policy {redact(spec)!r} holds a user:password: pass the URL without it and the key "
                "in an env var named by policy.endpoint.api_key_env"
            )
        check_endpoint_url(spec)  # `http://` is a typo, said as --policy's (the config would say policy.endpoint's)
        pol.kind = "endpoint"
        pol.endpoint.base_url = spec
    elif spec == "scripted" or spec.startswith("scripted:"):
        pol.kind = "scripted"
        path = spec.partition(":")[2]
        if path:
            pol.scripted_path = path
    elif Path(spec).is_dir():
        pol.kind = "local"
        pol.local_path = spec
    else:
        raise UsageError(
            f"--policy '{spec}': expected an http(s):// endpoint URL, an existing local model directory, or scripted:ANSWERS.yaml"
        )
    return pol


def check_endpoint_reachable(base_url: str | None, timeout_s: float = 5.0) -> None:
    """Fail fast with one line when the policy endpoint cannot be reached at all."""
    if not base_url:
        return
    if (failure := endpoint_failure(base_url, timeout_s)) is not None:
        raise UsageError(f"policy endpoint {base_url} is unreachable ({failure}): start the server or fix --policy")


def endpoint_failure(base_url: str, timeout_s: float = 5.0) -> str | None:
    """Why an OpenAI-compatible server at `base_url` does not answer at all (the error's type name), or None when it
    answers anything at /models; a URL that does not parse or names no host is a UsageError of its own."""
    check_endpoint_url(base_url)
    try:
        httpx.get(base_url.rstrip("/") + "/models", timeout=timeout_s)
    except httpx.HTTPError as e:
        return type(e).__name__
    return None


def check_endpoint_url(base_url: str) -> None:
    """A policy URL must parse and name a host (agents.config.url_problem): a typo is not an outage."""
    if problem := url_problem(base_url):
        raise UsageError(f"policy endpoint {base_url!r} is {problem}: e.g. http://localhost:8000/v1")


def make_policy(pol: PolicyConfig, *, name: str | None = None) -> PolicyModel:
    """A PolicyModel for the configured backend."""
    if pol.kind == "local":
        if not pol.local_path or not Path(pol.local_path).is_dir():
            raise UsageError(
                f"policy.local_path '{pol.local_path}' is not a directory: point it at a Hugging Face model folder"
            )
        from gapforge.serving.local import LocalPolicy

        return LocalPolicy(
            pol.local_path, pol.adapter_path, temperature=pol.temperature, max_new_tokens=pol.max_new_tokens, name=name
        )
    if pol.kind == "endpoint":
        from gapforge.serving.openai_policy import EndpointPolicy

        ep = pol.endpoint
        key = ep.api_key  # refused before any request when it would go where it does not belong
        check_endpoint_reachable(ep.base_url)
        return EndpointPolicy(
            ep.base_url or "https://api.openai.com/v1",
            ep.model,
            api_key=key.get_secret_value() if key else None,
            temperature=pol.temperature,
            max_tokens=pol.max_new_tokens,
            timeout_s=ep.timeout_s,
            max_retries=ep.max_retries,
            retry_backoff_s=ep.retry_backoff_s,
            name=name,
        )
    from gapforge.agents.llm import chat_model_from_config
    from gapforge.agents.policy import ChatModelPolicy

    if pol.scripted_path and not Path(pol.scripted_path).is_file():
        raise UsageError(f"scripted answers file '{pol.scripted_path}' not found")
    default_name = f"scripted:{Path(pol.scripted_path or '').name}"
    return ChatModelPolicy(chat_model_from_config(pol, section="policy"), name=name or default_name)


def make_target_env_factory(
    cfg: GapforgeConfig, env_name: str
) -> tuple[TargetEnvironment, Callable[[], TargetEnvironment]]:
    """Validate the env name now (one-line error) and return (probe instance, zero-arg factory).

    With `rollouts.user: llm` the user simulator talks to the `llm.endpoint`: the shop
    env takes a LangChain chat model; tau2 and ToolSandbox drive their own simulators
    (litellm / ToolSandbox's OpenAI user) from the endpoint settings.
    """
    from gapforge.envs.registry import is_shop, make_env

    user_model = None
    if cfg.rollouts.user == "llm":
        if not is_shop(env_name):
            user_model = user_simulator_endpoint(cfg)
        else:
            from gapforge.agents.llm import make_chat_model

            user_model = make_chat_model(user_simulator_endpoint(cfg))
    probe = make_env(env_name, user=cfg.rollouts.user, user_model=user_model)
    return probe, functools.partial(
        make_env, env_name, user=cfg.rollouts.user, user_model=user_model
    )  # picklable: worker processes build it


def user_simulator_endpoint(cfg: GapforgeConfig) -> EndpointConfig:
    """The endpoint the LLM user simulator talks to (`rollouts.user_endpoint`): llm.endpoint, or the served policy's base
    model (policy.endpoint at temperature 0, as τ²'s own user simulator samples; never an adapter's name)."""
    if cfg.rollouts.user_endpoint == "llm":
        return cfg.llm.endpoint
    if cfg.policy.kind != "endpoint":
        raise UsageError(
            f"rollouts.user_endpoint=policy needs a served policy (policy.kind=endpoint), not policy.kind={cfg.policy.kind}: "
            "serve it, or set rollouts.user_endpoint=llm"
        )
    # the loaded key comes along (a private attribute); its chat model samples at ENDPOINT_TEMPERATURE, 0
    return cfg.policy.endpoint.model_copy()


def sandbox_checks(cfg: GapforgeConfig):
    """None (the sandbox checks run here), GRPO readiness on local worker processes (a local policy on a CPU-only
    machine: as many as gapforge.stages.common.rollout_workers gives), or the Ray drop-ins that run both on a Docker
    node; readiness with a policy each worker builds from `cfg.policy`."""
    from gapforge.executor import sandbox_checks as checks
    from gapforge.stages.common import rollout_workers

    factory = functools.partial(make_policy, cfg.policy) if cfg.policy.kind != "scripted" else None
    workers, threads = rollout_workers(cfg)
    return checks(cfg.executor, cfg.sandbox, factory, local_workers=workers, threads=threads)
