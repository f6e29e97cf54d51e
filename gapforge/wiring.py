"""Composition root: the one place that picks concrete classes from the config
(store, sandbox pool, policy backends, chat models, target envs) and bundles them
into the `agents.deps.StageDeps` that stage services and graph nodes receive."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from agents.config import credentials_in_url
from agents.deps import StageDeps
from gapforge.config import GapforgeConfig, PolicyConfig
from gapforge.errors import UsageError
from store.redact import redact

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from envs.protocol import PolicyModel, TargetEnvironment
    from sandbox.pool import SandboxPool
    from store import Store


def open_store(cfg: GapforgeConfig) -> Store:
    from store import Store

    cfg.workspace.mkdir(parents=True, exist_ok=True)
    return Store(cfg.store_url)


def open_sandbox_pool(cfg: GapforgeConfig, *, size: int | None = None) -> SandboxPool:
    """A warm pool of sandboxes (`sandbox.pool_size`, or `size`); the caller closes it."""
    from sandbox.pool import SandboxPool

    return SandboxPool(cfg.sandbox, size=cfg.sandbox.pool_size if size is None else size)


def make_role_chat_model(cfg: GapforgeConfig, role: str = "llm") -> BaseChatModel:
    """The chat model of an LLM role: `llm` (analyst, generator, reviewer, user simulator) or `policy`."""
    from agents.llm import chat_model_from_config

    if role == "policy":
        return chat_model_from_config(cfg.policy, section="policy")
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
        readiness=cfg.grpo_readiness,
        self_test=cfg.self_test,
    )


def apply_policy_spec(cfg: GapforgeConfig, spec: str | None) -> PolicyConfig:
    """`--policy` shorthand -> policy config: an http(s) URL (OpenAI-compatible
    endpoint), a local model directory, or `scripted[:ANSWERS_FILE]`."""
    pol = cfg.policy.model_copy(deep=True)
    if spec is None:
        return pol
    if spec.startswith(("http://", "https://")):
        if credentials_in_url(spec):
            raise UsageError(f"--policy {redact(spec)!r} holds a user:password: pass the URL without it and the key "
                             "in an env var named by policy.endpoint.api_key_env")
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
    check_endpoint_url(base_url)
    url = base_url.rstrip("/") + "/models"
    try:
        httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as e:
        raise UsageError(f"policy endpoint {base_url} is unreachable ({type(e).__name__}): start the server or fix --policy") from None


def check_endpoint_url(base_url: str) -> None:
    """A policy URL must parse and name a host: `http://` or `http://[::1` are typos, not outages."""
    try:
        url = httpx.URL(base_url)
        host = url.host
    except (httpx.InvalidURL, ValueError, TypeError) as e:
        raise UsageError(f"policy endpoint {base_url!r} is not a valid URL ({e}): e.g. http://localhost:8000/v1") from None
    if url.scheme not in ("http", "https") or not host:
        raise UsageError(f"policy endpoint {base_url!r} is not an http(s) URL with a host: e.g. http://localhost:8000/v1")


def make_policy(pol: PolicyConfig, *, name: str | None = None) -> PolicyModel:
    """A PolicyModel for the configured backend."""
    if pol.kind == "local":
        if not pol.local_path or not Path(pol.local_path).is_dir():
            raise UsageError(f"policy.local_path '{pol.local_path}' is not a directory: point it at a Hugging Face model folder")
        from serving.local import LocalPolicy

        return LocalPolicy(pol.local_path, pol.adapter_path, temperature=pol.temperature, max_new_tokens=pol.max_new_tokens, name=name)
    if pol.kind == "endpoint":
        from serving.openai_policy import EndpointPolicy

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
            breaker_failures=ep.breaker_failures,
            breaker_cooldown_s=ep.breaker_cooldown_s,
            name=name,
        )
    from agents.llm import chat_model_from_config
    from agents.policy import ChatModelPolicy

    if pol.scripted_path and not Path(pol.scripted_path).is_file():
        raise UsageError(f"scripted answers file '{pol.scripted_path}' not found")
    default_name = f"scripted:{Path(pol.scripted_path or '').name}"
    return ChatModelPolicy(chat_model_from_config(pol, section="policy"), name=name or default_name)


def make_target_env_factory(cfg: GapforgeConfig, env_name: str) -> tuple[TargetEnvironment, Callable[[], TargetEnvironment]]:
    """Validate the env name now (one-line error) and return (probe instance, zero-arg factory).

    With `rollouts.user: llm` the user simulator talks to the `llm.endpoint`: the shop
    env takes a LangChain chat model, tau2 drives its own simulator (litellm) from
    the endpoint settings.
    """
    from envs.registry import make_env

    user_model = None
    if cfg.rollouts.user == "llm":
        if env_name.startswith("tau2:"):
            user_model = cfg.llm.endpoint
        else:
            from agents.llm import make_chat_model

            user_model = make_chat_model(cfg.llm.endpoint)
    probe = make_env(env_name, user=cfg.rollouts.user, user_model=user_model)
    return probe, (lambda: make_env(env_name, user=cfg.rollouts.user, user_model=user_model))


def episode_player(cfg: GapforgeConfig, pol: PolicyConfig, make_env: Callable[[], TargetEnvironment]):
    """Where the collector's episodes are played (`async with`): None = this process (executor.kind local),
    else Ray actors that each build the policy `pol` and envs from `make_env` themselves."""
    from executor import episode_player as player

    return player(cfg.executor, functools.partial(make_policy, pol), make_env, cfg.rollouts.concurrency)


def connect_executor(cfg: GapforgeConfig) -> None:
    """executor.kind ray: join the cluster now, so an unreachable head stops a command before any work
    (ExecutorUnavailable: one line naming executor.address, exit 2). A no-op for kind local."""
    from executor import connect

    connect(cfg.executor)


def executor_overrides(overrides: list[str] | None) -> list[str]:
    """The `--set executor.*` items of a command: where a resumed run executes is this invocation's choice
    (another machine, another cluster), not the stored record's."""
    return [item for item in overrides or [] if item.strip().startswith("executor.")]


def job_runner(cfg: GapforgeConfig):
    """`training.run.run_jobs` (local processes) or its Ray twin (one task per job, the adapter comes back)."""
    from executor import job_runner as runner

    return runner(cfg.executor)


def sandbox_checks(cfg: GapforgeConfig):
    """None (the sandbox checks run here) or the Ray drop-ins that run them on a Docker node, readiness
    with a policy each task builds from `cfg.policy`."""
    from executor import sandbox_checks as checks

    factory = functools.partial(make_policy, cfg.policy) if cfg.policy.kind != "scripted" else None
    return checks(cfg.executor, cfg.sandbox, factory)


def evaluation_players(cfg: GapforgeConfig, store, run_id: str, base_dir: str, artifacts, make_env):
    """`evaluation.run.evaluate(players=...)`: None (every policy plays here), or, on Ray with the local multi-adapter
    backend (policy.kind local), Ray actors that rebuild each evaluated policy from the base weights and the adapters'
    bytes. A served policy (endpoint: vLLM holds the adapters) keeps its few HTTP clients on the driver."""
    if cfg.executor.kind == "local" or cfg.policy.kind != "local":
        return None
    from evaluation.policies import GRPO_TARGET
    from executor.evaluation import eval_players, recipe

    paths = dict(artifacts.adapter_paths)
    baseline = store.get_adapter(run_id, GRPO_TARGET)
    if baseline is not None and baseline.status == "done" and baseline.path:
        paths[GRPO_TARGET] = baseline.path
    base = recipe(base_dir, paths, artifacts.capabilities, list(artifacts.adapter_paths), GRPO_TARGET if GRPO_TARGET in paths else None,
                  temperature=cfg.policy.temperature, max_new_tokens=cfg.policy.max_new_tokens, seed=cfg.seed,
                  worker_dir=cfg.executor.worker_dir)
    return eval_players(cfg.executor, base, make_env, cfg.rollouts.concurrency)


def make_synthesis_deps(cfg: GapforgeConfig, store, pool, progress=None):
    """The environment-synthesis stage's dependencies: generator/reviewer chat model (recorded
    answers when llm.kind is scripted), the sandbox (every generated module runs only there),
    and the base policy for GRPO readiness when policy.kind is endpoint|local."""
    from agents.synthesis.service import SynthesisDeps

    if cfg.llm.kind == "scripted":
        from agents.synthesis.recorded import recorded_synthesis_model

        chat_model = recorded_synthesis_model(cfg.synthesis.recordings)
    else:
        from agents.llm import chat_model_from_config

        chat_model = chat_model_from_config(cfg.llm)
    policy = run_episode = None
    if cfg.policy.kind != "scripted":
        from agents.policy import run_episode as policy_episode

        policy, max_turns = make_policy(cfg.policy), cfg.rollouts.max_turns

        async def run_episode(pol, env, seed, temperature):
            return await policy_episode(pol, env, seed, max_turns=max_turns, temperature=temperature)

    return SynthesisDeps(
        store=store, chat_model=chat_model, sandbox=cfg.sandbox, pool=pool,
        workspace=cfg.workspace, config=cfg.synthesis, policy=policy, run_episode=run_episode,
        readiness=cfg.grpo_readiness, progress=progress, checks=sandbox_checks(cfg),
    )
