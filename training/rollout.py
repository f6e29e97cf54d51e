"""Multi-turn rollouts as exact token streams, for any Environment of the one protocol.

`run_groups` plays K episodes of each task (same seed: identical initial state) in lockstep: each turn the
still-active episodes are sampled as one batch, each sampled turn is parsed into a protocol message and stepped
through its own env instance, and the env's answer is appended as the template delta (training.tokens). Tool results
and simulated-user replies both come from `env.step`, so a simulated user answers between model turns.

A bad rollout is data, not a crash: an env exception or timeout (an env call slower than `training.env_timeout_s`; the
call is abandoned on its daemon thread, envs.env_threads, so it never holds the process at exit) ends that rollout
with `failure` = "env: <reason>", a sandbox lost for good (not the env's doing) with "infra: <reason>"; an unparsable
model turn ends it too (blamed on the model: "model: ...") and the env scores the episode as it stands. A rollout that
an env or infrastructure fault ended is `dropped`: it is no evidence about the model, so its sampled tokens are masked
out of the loss (env_mask 0) and GRPO never trains on it as a reward of 0 (training/grpo.py gives it its group's
healthy mean and counts it per step). Every env instance is closed before `run_groups` returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

from gapforge.envs.env_threads import DaemonThreads
from gapforge.envs.errors import PolicyError
from gapforge.envs.protocol import USER_TOKENS, Environment, Message, TaskRef, returned
from gapforge.sandbox.errors import SandboxError
from gapforge.serving.chat_format import tool_format_of
from gapforge.serving.tool_calls import parse_turn
from gapforge.training.sampler import Sampler
from gapforge.training.tokens import TokenTrajectory, encode, env_delta, render

EnvFactory = Callable[[], Environment]
log = logging.getLogger(__name__)
DROPPED = ("env", "infra")


USER_TOKENS_SPENT = [0, 0]  # prompt, completion: an LLM user simulator's, over every rollout this process scored
_SPENT = threading.Lock()


@dataclass
class TokenRollout:
    task: TaskRef
    traj: TokenTrajectory
    messages: list[Message] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    components: dict[str, float] = field(default_factory=dict)
    failure: str | None = None  # "env: ...", "infra: ...", "model: ...", "length: ..." — who ended it early
    turns: int = 0
    cut_turns: int = 0  # turns that hit max_new_tokens (closed by an env-side eos, which the loss ignores)
    malformed_turns: int = 0  # unparsable tool calls passed on as text (malformed="continue")
    gen_s: float = 0.0
    env_s: float = 0.0

    @property
    def dropped(self) -> str | None:
        """'env' / 'infra' when an env or infrastructure fault ended it: not the model's doing, never trained on."""
        boundary = (self.failure or "").partition(":")[0]
        return boundary if boundary in DROPPED else None

    def drop_from_loss(self) -> None:
        """Mask every sampled token: the loss sees none of this rollout."""
        self.traj.env_mask = [0] * len(self.traj.env_mask)


class _Episode:
    def __init__(self, env: Environment, task: TaskRef, timeout_s: float, pool: futures.Executor) -> None:
        self.env, self.timeout_s, self.pool = env, timeout_s, pool
        self.rollout = TokenRollout(task=task, traj=TokenTrajectory(prompt_ids=[]))
        self.tools: list[dict[str, Any]] = []
        self.active = True

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """An env call under a deadline; its time is counted as env time."""
        t0 = time.perf_counter()
        try:
            return self.pool.submit(fn, *args).result(timeout=self.timeout_s)
        except futures.TimeoutError:
            raise TimeoutError(f"{getattr(fn, '__name__', 'env call')} took longer than {self.timeout_s:g}s") from None
        finally:
            self.rollout.env_s += time.perf_counter() - t0

    def fail(self, boundary: str, err: BaseException) -> None:
        if boundary == "env" and isinstance(err, SandboxError):
            boundary = "infra"  # a sandbox lost past its retries (or unusable): not the env's doing
        kind = getattr(err, "kind", type(err).__name__)
        self.rollout.failure = f"{boundary}: {kind}: {str(err).splitlines()[0][:300] if str(err) else ''}"
        self.rollout.reward, self.rollout.success = 0.0, False
        self.active = False

    def finish(self) -> None:
        """Score the episode as it stands (unless the env already failed)."""
        self.active = False
        if self.rollout.dropped is not None:
            return
        try:
            score, r = returned("score", self.call(self.env.score)), self.rollout
            r.reward, r.success, r.components = score.reward, score.success, dict(score.components)
            prompt, completion = score.info.get(USER_TOKENS) or (0, 0)
            with _SPENT:
                USER_TOKENS_SPENT[0] += int(prompt)
                USER_TOKENS_SPENT[1] += int(completion)
        except Exception as e:  # noqa: BLE001 - any env failure is a zero-reward rollout
            self.fail("env", e)


def settings(cfg: Any) -> dict[str, Any]:
    """`run_groups`' settings from a TrainingConfig (GRPO steps and held-out evaluations play alike)."""
    return {
        "max_turns": cfg.max_turns,
        "malformed": cfg.malformed_tool_calls,
        "max_new_tokens": cfg.max_new_tokens,
        "max_completion_length": cfg.max_completion_length,
        "temperature": cfg.temperature,
        "env_timeout_s": cfg.env_timeout_s,
    }


def run_group(make_env: EnvFactory, task: TaskRef, k: int, **settings: Any) -> list[TokenRollout]:
    """K rollouts of `task` (`run_groups`' settings), its rows unkeyed: the sampler seeds them by call and position
    (training.sampler.TransformersSampler)."""
    return run_groups(make_env, [(task, k)], keyed=False, **settings)[0]


def run_groups(
    make_env: EnvFactory,
    groups: list[tuple[TaskRef, int]],
    *,
    sampler: Sampler,
    tokenizer: Any,
    max_turns: int,
    max_new_tokens: int,
    max_completion_length: int,
    temperature: float,
    env_timeout_s: float,
    malformed: str = "end",
    keyed: bool = True,
) -> list[list[TokenRollout]]:
    """Several groups `[(task, K), ...]` in one lockstep, each rollout with its own env instance, all closed on
    return: each turn samples every live rollout of every group as one batch. Row i of group g at turn t samples with
    the seed of its key (g, i, t), so its tokens do not depend on which rows share its batch (up to float rounding of
    differently shaped matmuls). An unparsable tool call ends its rollout (`malformed="end"`, blamed on the model) or
    is passed to the env as the turn's text, as a chat API would return it, and the rollout goes on (`"continue"`)."""
    if malformed not in ("end", "continue"):
        raise ValueError(f"malformed must be 'end' or 'continue', got {malformed!r}")
    pool = DaemonThreads("train-env")  # a call past its deadline is abandoned, never joined at exit
    episodes: list[_Episode] = []
    keys: list[tuple[int, int]] = []
    try:
        for g, (task, k) in enumerate(groups):
            for i in range(k):
                env = make_env()
                ep = _Episode(env, task, env_timeout_s, pool)
                episodes.append(ep)
                keys.append((g, i))
                try:
                    ep.tools = ep.call(env.tools)
                    ep.rollout.messages = returned("reset", ep.call(env.reset, task))
                    ep.rollout.traj.prompt_ids = encode(
                        tokenizer, render(tokenizer, ep.rollout.messages, ep.tools, generation_prompt=True)
                    )
                    if getattr(env, "done", False) is True:  # over before the first turn (τ²): scored as it stands
                        ep.finish()
                except Exception as e:  # noqa: BLE001
                    ep.fail("env", e)
                    ep.rollout.traj.prompt_ids = [tokenizer.eos_token_id]
        for turn in range(max_turns):
            live = [(ep, key) for ep, key in zip(episodes, keys) if ep.active]
            if not live:
                break
            t0 = time.perf_counter()
            contexts = [ep.rollout.traj.context_ids for ep, _ in live]
            by_key = {"keys": [(g, i, turn) for _, (g, i) in live]} if keyed else {}
            samples = sampler.sample(contexts, max_new_tokens=max_new_tokens, temperature=temperature, **by_key)
            share = (time.perf_counter() - t0) / len(live)
            for (ep, _), smp in zip(live, samples, strict=True):
                _advance(ep, smp, share, tokenizer, max_completion_length, malformed)
        for ep in episodes:
            if ep.active:
                ep.finish()
        for ep in episodes:  # a rollout with no sampled token still needs one completion token for TRL
            if not ep.rollout.traj.completion_ids:
                ep.rollout.traj.add_env([tokenizer.eos_token_id])
            if ep.rollout.dropped is not None:
                ep.rollout.drop_from_loss()
        out, at = [], 0
        for _, k in groups:
            out.append([ep.rollout for ep in episodes[at : at + k]])
            at += k
        return out
    finally:
        for ep in episodes:
            try:
                ep.env.close()
            except Exception as e:  # noqa: BLE001 - closing a broken env must not hide the result
                log.warning("closing env %s failed: %s", getattr(ep.env, "name", "?"), e)
        pool.shutdown(wait=False, cancel_futures=True)


def _advance(
    ep: _Episode, smp: Any, gen_s: float, tokenizer: Any, max_completion_length: int, malformed: str = "end"
) -> None:
    r = ep.rollout
    r.gen_s += gen_s
    r.turns += 1
    r.traj.add_sampled(smp.ids, smp.logprobs)
    if not smp.finished:  # the turn was cut at max_new_tokens: the env closes it with an (unmasked-out) eos
        r.traj.add_env([tokenizer.eos_token_id])
        r.cut_turns += 1
    text = tokenizer.decode(smp.ids, skip_special_tokens=True)
    try:
        message = parse_turn(text, tool_format_of(tokenizer.chat_template))  # reasoning kept: the template renders it
    except PolicyError as e:
        if malformed == "end":
            r.failure = f"model: {str(e).splitlines()[0][:300]}"
            ep.finish()
            return
        r.malformed_turns += 1
        message = Message.assistant(content=text)
    r.messages.append(message)
    try:
        result = returned("step", ep.call(ep.env.step, message))
    except Exception as e:  # noqa: BLE001
        ep.fail("env", e)
        return
    if result.done:
        r.messages += result.messages
        ep.finish()
        return
    delta = encode(tokenizer, env_delta(tokenizer, r.messages, result.messages, ep.tools))  # TemplateDriftError raises
    r.messages += result.messages
    if len(r.traj.completion_ids) + len(delta) >= max_completion_length:
        r.failure = "length: the rollout reached max_completion_length"
        ep.finish()
        return
    r.traj.add_env(delta)
