"""Labeling: ONE structured call per (episode, pass) labels every capability NA / PRESENT / LACKING with one line of
evidence citing a message index.

- Layout: the system message (instructions naming the target, agents/analysis/target.py, + dictionary + policy) is
  the same for every call of a pass (prefix caching applies); the compacted episode is the last message.
- Validation (schemas.label_schema): every capability exactly once, no unknown names, evidence index in range;
  re-asked once with the error, then recorded as a failure (status "failed", boundary "model_output"); an endpoint
  still failing past the factory's retries is recorded with boundary "endpoint". Never silently NA.
- At most cfg.concurrency calls in flight. An endpoint chat model from the factory is spoken to over lean HTTP
  (agents/structured_http.py: same request, retry policy and re-ask, ~1/10 of the client CPU); the scripted model
  and other chat models through LangChain.
- Cache: store.label_calls keyed by (episode, pass, dictionary hash, prompt version); a call's record and labels are
  written in one transaction as soon as it finishes (calls finishing meanwhile go together in the next one:
  store.put_label_calls), so a re-run makes zero calls for what is stored and a killed pass resumes without duplicates.
- Passes are independent samples: seed = f(cfg.seed, pass) (OpenAI `seed`), temperature from cfg.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.messages import HumanMessage, SystemMessage

from gapforge.agents.analysis.compact import ByteEstimate, TokenCounter, compact_episode, system_prompt
from gapforge.agents.analysis.config import AnalysisConfig
from gapforge.agents.analysis.discovery import current_dictionary
from gapforge.agents.analysis.schemas import EPISODE_MESSAGES, label_schema
from gapforge.agents.analysis.split import analysis_episodes
from gapforge.agents.analysis.target import TargetBrief, target_brief
from gapforge.agents.analysis.usage import UsageCounter, seeded
from gapforge.agents.errors import ModelEndpointError, StructuredOutputError
from gapforge.agents.llm import astructured_call
from gapforge.agents.structured_http import StructuredHTTP
from gapforge.prompts import load_prompt
from gapforge.store.analysis_records import LabelCallRecord

if TYPE_CHECKING:
    from gapforge.store import Store

PROMPT_FILE = "analyst_label.md"
Progress = Callable[[int, int], None]  # (done, total), called after every episode


@dataclass(frozen=True)
class LabelPassResult:
    run_id: str
    pass_index: int
    dictionary_hash: str
    prompt: str
    episodes: int
    cached: int  # episodes whose call was already stored (no new call)
    labeled: int  # new calls that ended with valid labels
    failed: int  # new calls recorded as labeling failures
    calls: int  # requests made (re-asks included)
    prompt_tokens: int
    completion_tokens: int
    prefix_tokens: int  # tokens of the shared fixed part (instructions + dictionary + policy)
    token_counter: str
    seconds: float


def label_seed(seed: int, pass_index: int) -> int:
    """The sampling seed of a labeling pass (passes are independent samples)."""
    digest = hashlib.sha256(f"label:{seed}:{pass_index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def fixed_part(capabilities: Sequence[tuple[str, str]], policy: str, target: TargetBrief) -> str:
    """The system message of every labeling call: instructions naming the target, dictionary, policy."""
    lines = "\n".join(f"- {name}: {definition}" for name, definition in capabilities)
    return load_prompt(PROMPT_FILE).body.format(
        capabilities=lines, policy=policy, target=target.name, tool_names=target.tools_line()
    )


def _evidence(text: str, index: int | None) -> str:
    line = " ".join(text.split())
    return line if index is None or line.startswith(f"[{index}]") else f"[{index}] {line}"


async def label_pass(
    store: Store,
    chat_model: Any,
    run_id: str,
    pass_index: int,
    *,
    cfg: AnalysisConfig,
    counter: TokenCounter | None = None,
    retry_failed: bool = False,
    on_progress: Progress | None = None,
) -> LabelPassResult:
    """Label every analysis-split episode of the run in pass `pass_index` (0-based); see the module doc."""
    started = time.perf_counter()
    counter = counter or ByteEstimate()
    prompt = load_prompt(PROMPT_FILE)
    capabilities, dhash = current_dictionary(store, run_id)
    names = tuple(name for name, _ in capabilities)
    episodes = await asyncio.to_thread(analysis_episodes, store, run_id, fraction=cfg.split_fraction, seed=cfg.seed)
    done_before = await asyncio.to_thread(store.label_call_status, run_id, pass_index, dhash, prompt.version)
    # An endpoint failure is not final (the endpoint's fault, not the model's): always redone.
    # A model-output failure is the model's answer: redone only when asked (retry_failed).
    failed_calls = await asyncio.to_thread(store.label_calls, run_id, pass_index, "failed")
    endpoint_failed = {
        c.episode_id
        for c in failed_calls
        if c.boundary == "endpoint" and c.dictionary_hash == dhash and c.prompt_version == prompt.version
    }
    skip = {e for e, s in done_before.items() if (s == "ok" or not retry_failed) and e not in endpoint_failed}
    todo = [e.id for e in episodes if e.id not in skip]
    total, cached = len(episodes), len(episodes) - len(todo)
    first = await asyncio.to_thread(store.get_episode, episodes[0].id) if episodes else None
    brief = target_brief(first.env, [first]) if first is not None else TargetBrief("", ())
    system_text = fixed_part(capabilities, system_prompt(first) if first is not None else "", brief)
    prefix_tokens = counter.count(system_text)
    seed = label_seed(cfg.seed, pass_index)
    model = seeded(chat_model, seed, cfg.temperature)  # one sample per pass: its own seed
    schema = label_schema(names)
    sem = asyncio.Semaphore(cfg.concurrency)
    totals = {"labeled": 0, "failed": 0, "calls": 0, "prompt": 0, "completion": 0, "done": cached}
    if on_progress:
        on_progress(cached, total)

    upcoming = {e: i for i, e in enumerate(todo)}
    fetched: dict[int, Any] = {}
    consumed: set[int] = set()
    read_lock = asyncio.Lock()

    async def read(episode_id: int) -> Any:
        """The episode, read with the next ones in line (calls start in `todo` order): one
        query per `concurrency` episodes instead of one each; at most ~2 chunks held."""
        async with read_lock:
            if episode_id not in fetched:
                start = upcoming[episode_id]
                chunk = [e for e in todo[start : start + cfg.concurrency] if e not in fetched and e not in consumed]
                fetched.update((e.id, e) for e in await asyncio.to_thread(store.get_episodes, chunk))
            consumed.add(episode_id)
            return fetched.pop(episode_id)

    async def label(episode_id: int) -> LabelCallRecord:
        async with sem:
            ep = await read(episode_id)
            comp = compact_episode(ep, counter)
            usage = UsageCounter()
            status, boundary, error, labels = "ok", None, None, []
            EPISODE_MESSAGES.set(comp.n_messages)  # this task's own context: concurrent calls do not see it
            try:
                if lean is not None:
                    wire = [{"role": "system", "content": system_text}, {"role": "user", "content": comp.text}]
                    answer = await lean.acall(wire, schema, usage=usage)
                else:
                    messages = [SystemMessage(content=system_text), HumanMessage(content=comp.text)]
                    answer = await astructured_call(
                        model, messages, schema, prompt_name=prompt.name, config={"callbacks": [usage]}
                    )
                by_name = {lab.capability: lab for lab in answer.labels}  # type: ignore[attr-defined]
                labels = [
                    (n, by_name[n].label, _evidence(by_name[n].evidence, by_name[n].message_index)) for n in names
                ]
            except StructuredOutputError as e:
                status, boundary, error = "failed", "model_output", str(e)
            except ModelEndpointError as e:
                status, boundary, error = "failed", "endpoint", str(e)
        calls = max(usage.calls, 1)
        prompt_tokens = usage.prompt_tokens or (prefix_tokens + comp.tokens) * calls
        completion_tokens = usage.completion_tokens or (counter.count(str(labels)) if labels else 0)
        key = (episode_id, pass_index, dhash, prompt.name, prompt.version)
        return LabelCallRecord(*key, status, labels, boundary, error, calls, prompt_tokens, completion_tokens, seed)

    pending: list[LabelCallRecord] = []
    write_lock = asyncio.Lock()

    async def one(episode_id: int) -> None:
        rec = await label(episode_id)
        pending.append(rec)
        # Whoever gets the lock writes everything finished so far in one transaction (few
        # SQLite/PostgreSQL round trips instead of one per call); the lock is FIFO, so when it
        # is our turn our record is either still pending or already written by an earlier holder.
        async with write_lock:
            if pending:
                batch = pending[:]
                pending.clear()
                await asyncio.to_thread(store.put_label_calls, run_id, batch)
        totals["labeled" if rec.status == "ok" else "failed"] += 1
        totals["calls"] += rec.calls
        totals["prompt"] += rec.prompt_tokens
        totals["completion"] += rec.completion_tokens
        totals["done"] += 1
        if on_progress:
            on_progress(totals["done"], total)

    lean = StructuredHTTP.from_chat_model(model) if cfg.lean_http else None
    tasks = [asyncio.ensure_future(one(e)) for e in todo]
    try:
        await asyncio.gather(*tasks)
    finally:  # a fatal error (ModelError, StoreError): stop the other calls before closing the client
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if lean is not None:
            await lean.aclose()
    counts = [totals[k] for k in ("labeled", "failed", "calls", "prompt", "completion")]
    elapsed = time.perf_counter() - started
    return LabelPassResult(
        run_id, pass_index, dhash, prompt.id, total, cached, *counts, prefix_tokens, counter.name, elapsed
    )
