"""Batched generation (serving.batching) and the per-episode seeds (envs.sampling): a row's tokens do
not depend on its batch, greedy equals transformers' own greedy decoding, concurrent callers are
batched, adapters never mix, and a collection is the same at any concurrency."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from gapforge.agents.rollouts import CollectPlan, collect
from gapforge.envs.protocol import Message
from gapforge.envs.sampling import episode_key, keyed_seed
from gapforge.envs.shop import ShopEnv
from gapforge.serving.batching import BatchGenerator, eos_ids_of
from gapforge.serving.local import LocalPolicy
from gapforge.serving.multi_adapter import MultiAdapterModel

PROMPTS = [
    "<|im_start|>user\nWhere is my order?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nPlease cancel order 1007 because I no longer need it, thanks.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
]


def _generator(policy: LocalPolicy, **kw) -> BatchGenerator:
    return BatchGenerator(policy.model, eos_ids=eos_ids_of(policy.model, policy.tokenizer), **kw)


def _ids(policy: LocalPolicy) -> list[list[int]]:
    return [policy.tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]


def test_greedy_batch_equals_transformers_generate(tiny_model_dir: Path) -> None:
    policy = LocalPolicy(tiny_model_dir)
    prompts = _ids(policy)
    batched = [
        d.ids for d in _generator(policy).run_batch(prompts, seeds=[0, 0, 0], temperature=0.0, max_new_tokens=24)
    ]
    for ids, got in zip(prompts, batched):
        with torch.inference_mode():
            out = policy.model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones((1, len(ids)), dtype=torch.long),
                do_sample=False,
                max_new_tokens=24,
                pad_token_id=policy.tokenizer.pad_token_id,
            )
        assert got == out[0, len(ids) :].tolist()[: len(got)] and len(got) > 0


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_rows_tokens_do_not_depend_on_its_batch(tiny_model_dir: Path, temperature: float) -> None:
    policy = LocalPolicy(tiny_model_dir)
    gen = _generator(policy)
    prompts = _ids(policy)
    alone = [
        gen.run_batch([p], seeds=[s], temperature=temperature, max_new_tokens=32)[0] for p, s in zip(prompts, [5, 6, 7])
    ]
    together = gen.run_batch(prompts, seeds=[5, 6, 7], temperature=temperature, max_new_tokens=32)
    assert [d.ids for d in together] == [d.ids for d in alone]
    for a, b in zip(alone, together):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4) and all(lp <= 0 for lp in a.logprobs)
    if temperature > 0:
        assert (
            gen.run_batch(prompts[:1], seeds=[8], temperature=1.0, max_new_tokens=32)[0].ids != alone[0].ids
        )  # the seed matters


def test_waiting_requests_are_decoded_as_one_batch(tiny_model_dir: Path) -> None:
    policy = LocalPolicy(tiny_model_dir)
    lock = threading.Lock()
    gen = _generator(policy, lock=lock)
    prompt = _ids(policy)[0]
    with lock:  # the worker blocks on its first batch while the others queue up
        futures = [gen.submit(prompt, temperature=1.0, max_new_tokens=8, seed=i) for i in range(8)]
    results = [f.result(timeout=60) for f in futures]
    gen.close()
    assert sum(gen.batch_sizes) == 8 and max(gen.batch_sizes) >= 7
    assert results == [
        d.ids for d in gen.run_batch([prompt] * 8, seeds=list(range(8)), temperature=1.0, max_new_tokens=8)
    ]


def test_a_failing_batch_fails_its_callers_and_the_worker_goes_on(tiny_model_dir: Path) -> None:
    policy = LocalPolicy(tiny_model_dir)
    gen = _generator(policy)
    bad = gen.submit([10**9], temperature=1.0, max_new_tokens=4, seed=0)  # an id outside the vocabulary
    with pytest.raises(IndexError):
        bad.result(timeout=60)
    assert len(gen.submit(_ids(policy)[0], temperature=0.0, max_new_tokens=4, seed=0).result(timeout=60)) > 0
    gen.close()


async def _respond_in(key: str | None, respond) -> str:
    if key is not None:
        episode_key.set(key)
    try:
        reply = await respond()
        return repr((reply.content, [(c.name, c.arguments) for c in reply.tool_calls]))
    except Exception as e:  # noqa: BLE001 - a malformed completion is an outcome too
        return repr(getattr(e, "raw", e))


async def test_episode_keys_make_samples_independent_of_call_order(tiny_model_dir: Path) -> None:
    conv = [Message.user("Where is my order #W1234567?")]
    policy = LocalPolicy(tiny_model_dir, max_new_tokens=24, temperature=1.0, seed=3)
    keys = [f"task-{i}#0" for i in range(4)]
    forward = [await _respond_in(k, lambda: policy.respond(conv, [])) for k in keys]
    backward = [await _respond_in(k, lambda: policy.respond(conv, [])) for k in reversed(keys)]
    together = await asyncio.gather(*(_respond_in(k, lambda: policy.respond(conv, [])) for k in keys))
    assert forward == backward[::-1] == list(together)
    assert len(set(forward)) > 1  # different episodes draw different samples
    assert keyed_seed(3, "a#0", 1) != keyed_seed(3, "a#1", 1) != keyed_seed(3, "a#0", 2)
    await policy.aclose()


async def test_adapters_in_flight_together_never_mix(tiny_model_dir: Path, tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False, task_type="CAUSAL_LM"
    )
    get_peft_model(base, config).save_pretrained(tmp_path / "a")
    backend = MultiAdapterModel(tiny_model_dir, {"a": tmp_path / "a"}, max_new_tokens=24)
    conv = [Message.user("Where is my order #W1234567?")]
    calls = [(f"t{i}#0", adapter) for i in range(3) for adapter in (None, "a")]

    def one(key: str, adapter: str | None):
        return _respond_in(key, lambda: backend.respond(conv, [], adapter=adapter, temperature=1.0))

    alone = [await one(k, a) for k, a in calls]
    together = await asyncio.gather(*(one(k, a) for k, a in calls))
    assert list(together) == alone
    assert alone[0::2] != alone[1::2]  # the adapter changes what is sampled
    await backend.aclose()


async def test_a_collection_is_the_same_at_any_concurrency(tiny_model_dir: Path) -> None:
    class Sink:
        def __init__(self) -> None:
            self.rows: dict[tuple[str, int], list] = {}

        def episode_keys(self, run_id: str, env: str) -> set[tuple[str, int]]:
            return set(self.rows)

        def add_episode(self, run_id: str, env: str, task_id: str, sample: int, **fields) -> int:
            self.rows[(task_id, sample)] = fields["messages"]
            return len(self.rows)

    tasks = ShopEnv().task_ids()[:3]
    runs = []
    for concurrency in (1, 4):
        policy = LocalPolicy(tiny_model_dir, max_new_tokens=24, temperature=1.0, seed=11)
        sink = Sink()
        await collect(
            CollectPlan("r", "shop", tasks, 2, concurrency, 3, 1.0), make_env=ShopEnv, policy=policy, sink=sink
        )
        await policy.aclose()
        runs.append(sink.rows)
    assert runs[0] == runs[1] and len(runs[0]) == 6
    assert len({repr(m) for m in runs[0].values()}) > 1


def test_a_cancelled_request_is_dropped_and_the_rest_of_its_batch_answered(tiny_model_dir: Path) -> None:
    policy = LocalPolicy(tiny_model_dir)
    lock = threading.Lock()
    gen = _generator(policy, lock=lock)
    prompt = _ids(policy)[0]
    with lock:
        first = gen.submit(prompt, temperature=1.0, max_new_tokens=4, seed=0)  # may be taken (running) already
        futures = [gen.submit(prompt, temperature=1.0, max_new_tokens=4, seed=i) for i in range(1, 5)]
        cancelled = futures[1].cancel()  # the caller went away (an episode cancelled mid-turn)
    answered = [f.result(timeout=60) for i, f in enumerate(futures) if i != 1 or not cancelled]
    assert first.result(timeout=60) and all(answered) and len(answered) == 4 - cancelled
    assert gen.submit(prompt, temperature=0.0, max_new_tokens=4, seed=0).result(timeout=60)  # the worker is still alive
    gen.close()


def test_top_k_and_top_p_sample_only_inside_the_kept_set(tiny_model_dir: Path) -> None:
    """The checkpoint's top_k / top_p (Qwen3 ships 20 / 0.95) restrict sampling as generate() does;
    the logprobs are those of the filtered distribution."""
    policy = LocalPolicy(tiny_model_dir)
    prompt = _ids(policy)[0]
    with torch.no_grad():
        logits = policy.model(torch.tensor([prompt])).logits[0, -1].float()
    top3 = set(torch.topk(logits, 3).indices.tolist())
    firsts = [
        d.ids[0]
        for d in _generator(policy, top_k=3).run_batch(
            [prompt] * 24, seeds=list(range(24)), temperature=5.0, max_new_tokens=1
        )
    ]
    assert set(firsts) <= top3 and len(set(firsts)) > 1
    nucleus = _generator(policy, top_p=1e-6).run_batch(
        [prompt] * 4, seeds=list(range(4)), temperature=1.0, max_new_tokens=1
    )
    assert {d.ids[0] for d in nucleus} == {int(logits.argmax())} and all(
        d.logprobs[0] == pytest.approx(0.0) for d in nucleus
    )


def test_a_dropped_generator_frees_its_model_and_stops_its_worker(tiny_model_dir: Path) -> None:
    import gc
    import weakref

    policy = LocalPolicy(tiny_model_dir)
    gen = _generator(policy)
    assert gen.submit(_ids(policy)[0], temperature=0.0, max_new_tokens=2, seed=0).result(timeout=60)
    lane, ref = gen._lane, weakref.ref(gen)
    del gen
    gc.collect()
    lane.thread.join(timeout=30)
    assert ref() is None and not lane.thread.is_alive()


def test_close_then_submit_starts_a_fresh_worker_and_loses_nothing(tiny_model_dir: Path) -> None:
    policy = LocalPolicy(tiny_model_dir)
    gen = _generator(policy)
    prompt = _ids(policy)[0]
    first = gen.submit(prompt, temperature=0.0, max_new_tokens=2, seed=0)
    gen.close()
    second = gen.submit(prompt, temperature=0.0, max_new_tokens=2, seed=0)
    assert first.result(timeout=60) == second.result(timeout=60)
    gen.close()
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        gen.submit(prompt, temperature=0.0, max_new_tokens=0, seed=0)


def test_caches_that_cannot_be_joined_are_decoded_row_by_row_with_the_same_tokens(
    tiny_model_dir: Path, monkeypatch
) -> None:
    """A model whose cache layers cannot be left-padded and joined (e.g. a sliding window) decodes
    each row on its own cache, with the same tokens a joined batch gives."""
    import gapforge.serving.batching  # noqa: F401 (loads the submodule that the name below reaches)
    from gapforge import serving

    policy = LocalPolicy(tiny_model_dir)
    prompts = _ids(policy)
    joined = _generator(policy).run_batch(prompts, seeds=[1, 2, 3], temperature=1.0, max_new_tokens=16)
    monkeypatch.setattr(serving.batching, "_joinable", lambda cache: False)
    gen = _generator(policy)
    alone = [
        f.result(timeout=60)
        for f in [gen.submit(p, temperature=1.0, max_new_tokens=16, seed=s) for p, s in zip(prompts, [1, 2, 3])]
    ]
    assert alone == [d.ids for d in joined]
    assert gen.run_batch(prompts, seeds=[1, 2, 3], temperature=1.0, max_new_tokens=16)[0].ids == joined[0].ids
    gen.close()


def test_a_decode_step_writes_the_cache_in_place_with_the_same_tokens(tiny_model_dir: Path, monkeypatch) -> None:
    """The decode cache is one slot buffer per layer with room for the new tokens: a step writes into it instead of
    re-copying the whole cache (torch.cat), and rows of three lengths, left-padded in it, sample exactly the tokens
    and logprobs of a plain transformers cache decoding each prompt alone."""
    import gapforge.serving.batching  # noqa: F401 (loads the submodule that the name below reaches)
    from gapforge import serving

    policy = LocalPolicy(tiny_model_dir)
    prompts = _ids(policy)
    storages: set[int] = set()
    slotted = _generator(policy, prefix_bytes=0).run_batch(prompts, seeds=[1, 2, 3], temperature=1.0, max_new_tokens=24)
    layer_class = serving.batching._slot_layer_class()
    real_update = layer_class.update

    def spy(self, key_states, value_states, *a, **k):
        out = real_update(self, key_states, value_states, *a, **k)
        storages.add(self._k.untyped_storage().data_ptr())
        return out

    monkeypatch.setattr(layer_class, "update", spy)
    _generator(policy, prefix_bytes=0).run_batch(prompts[:1], seeds=[1], temperature=1.0, max_new_tokens=24)
    assert len(storages) == policy.model.config.num_hidden_layers  # one buffer per layer for all 23 steps: no copies
    for prompt, seed, got in zip(prompts, [1, 2, 3], slotted):
        ids, logprobs = _plain_decode(policy, prompt, seed, 24)
        assert got.ids == ids and got.logprobs == pytest.approx(
            logprobs, abs=1e-5
        )  # float rounding of the padded batch


def _plain_decode(policy: LocalPolicy, prompt: list[int], seed: int, new_tokens: int) -> tuple[list[int], list[float]]:
    """One prompt on transformers' own DynamicCache (torch.cat per step), sampled with torch.multinomial (BatchGenerator's
    exponential race draws the same tokens from the same generator)."""
    from transformers import DynamicCache

    cache, generator, ids, logprobs = DynamicCache(), torch.Generator().manual_seed(seed), [], []
    with torch.no_grad():
        logits = policy.model(
            input_ids=torch.tensor([prompt]), past_key_values=cache, use_cache=True, logits_to_keep=1
        ).logits
        for step in range(new_tokens):
            logps = torch.log_softmax(logits[0, -1].float() / 1.0, dim=-1)
            token = torch.multinomial(logps.exp(), 1, generator=generator)[0]
            ids.append(int(token))
            logprobs.append(float(logps[token]))
            if step + 1 < new_tokens:
                logits = policy.model(
                    input_ids=token.view(1, 1),
                    position_ids=torch.tensor([[len(prompt) + step]]),
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=1,
                ).logits
    return ids, logprobs


def test_the_next_turn_prefills_only_what_is_new_and_samples_the_same(tiny_model_dir: Path) -> None:
    """A finished row's cache is kept: a context that extends it (the next turn of its episode) prefills
    only the new tokens and samples what a generator that keeps nothing samples. Another group (adapter)
    never reuses it, and a weight update drops every kept cache."""
    policy = LocalPolicy(tiny_model_dir)
    prompts = _ids(policy)
    reply = policy.tokenizer(
        "<|im_start|>user\nAnd the refund?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )["input_ids"]
    kept = _generator(policy)
    first = kept.run_batch(prompts, seeds=[1, 2, 3], temperature=1.0, max_new_tokens=20)
    assert kept.prefill_tokens == [sum(map(len, prompts)), 0]
    turn2 = [p + d.ids + reply for p, d in zip(prompts, first)]
    second = kept.run_batch(turn2, seeds=[4, 5, 6], temperature=1.0, max_new_tokens=20)
    reused = sum(len(p) + len(d.ids) - 1 for p, d in zip(prompts, first))
    assert kept.prefill_tokens == [sum(map(len, prompts)) + sum(map(len, turn2)) - reused, reused]
    fresh = _generator(policy, prefix_bytes=0).run_batch(turn2, seeds=[4, 5, 6], temperature=1.0, max_new_tokens=20)
    assert [d.ids for d in second] == [d.ids for d in fresh]
    for a, b in zip(second, fresh):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert len(kept.prefixes.entries) == 3  # each episode's second turn replaced its first

    before = list(kept.prefill_tokens)
    kept.run_batch(turn2[:1], seeds=[4], temperature=1.0, max_new_tokens=20, group="another-adapter")
    assert kept.prefill_tokens[1] == before[1]  # nothing reused across groups
    with torch.no_grad():
        policy.model.lm_head.weight.mul_(1.5)  # an optimizer step writes the weights in place
    changed = kept.run_batch(turn2[:1], seeds=[4], temperature=1.0, max_new_tokens=20)
    assert kept.prefill_tokens[1] == before[1]  # the kept caches were computed by other weights: dropped
    assert (
        changed[0].ids
        == _generator(policy, prefix_bytes=0).run_batch(turn2[:1], seeds=[4], temperature=1.0, max_new_tokens=20)[0].ids
    )


def test_kept_prefixes_stay_inside_their_byte_budget(tiny_model_dir: Path) -> None:
    policy = LocalPolicy(tiny_model_dir)
    prompts = _ids(policy)
    gen = _generator(policy, prefix_bytes=0)
    gen.run_batch(prompts, seeds=[1, 2, 3], temperature=1.0, max_new_tokens=8)
    assert gen.prefixes.entries == {}
    sizes = []
    for p, seed in zip(prompts[:2], [1, 2]):
        one = _generator(policy)
        one.run_batch([p], seeds=[seed], temperature=1.0, max_new_tokens=8)
        sizes.append(one.prefixes.size)
    budget = max(sizes) + min(sizes) // 2  # room for either row, not both
    small = _generator(policy, prefix_bytes=budget)
    small.run_batch(prompts[:1], seeds=[1], temperature=1.0, max_new_tokens=8)
    small.run_batch(prompts[1:2], seeds=[2], temperature=1.0, max_new_tokens=8)
    assert len(small.prefixes.entries) == 1 and small.prefixes.size == sizes[1] <= budget
    assert (
        next(iter(small.prefixes.entries.values())).ids[: len(prompts[1])].tolist() == prompts[1]
    )  # the older row left first


def test_rows_that_leave_the_batch_early_keep_their_own_cache(tiny_model_dir: Path) -> None:
    """Rows with different token limits leave the batch at different steps (the batch's cache is narrowed
    each time): the cache each one keeps is its own, so its next turn samples what a fresh generator does."""
    from gapforge.serving.batching import _request

    policy = LocalPolicy(tiny_model_dir)
    prompts = _ids(policy)
    reply = policy.tokenizer("<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)[
        "input_ids"
    ]
    kept = _generator(policy)
    limits = [5, 20, 9]
    first = kept._decode([_request(p, 1.0, n, s, None) for p, n, s in zip(prompts, limits, [1, 2, 3])])
    assert [len(d.ids) for d in first] == limits  # the tiny random model never says eos this early
    turn2 = [p + d.ids + reply for p, d in zip(prompts, first)]
    second = kept.run_batch(turn2, seeds=[4, 5, 6], temperature=1.0, max_new_tokens=12)
    assert kept.prefill_tokens[1] == sum(len(p) + n - 1 for p, n in zip(prompts, limits))
    fresh = _generator(policy, prefix_bytes=0).run_batch(turn2, seeds=[4, 5, 6], temperature=1.0, max_new_tokens=12)
    assert [d.ids for d in second] == [d.ids for d in fresh]
    for a, b in zip(second, fresh):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_forget_prefixes_after_a_weight_change_the_check_cannot_see(tiny_model_dir: Path) -> None:
    """Swapping a tensor's storage (`.data = ...`, as a fused optimizer's in-place kernel or load_state_dict(assign=True)
    can) leaves the version counters alone; the owner calls forget_prefixes() and nothing stale is reused."""
    policy = LocalPolicy(tiny_model_dir)
    prompts = _ids(policy)
    reply = policy.tokenizer("<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)[
        "input_ids"
    ]
    gen = _generator(policy)
    first = gen.run_batch(prompts, seeds=[1, 2, 3], temperature=1.0, max_new_tokens=8)
    turn2 = [p + d.ids + reply for p, d in zip(prompts, first)]
    policy.model.model.layers[0].self_attn.k_proj.weight.data = (
        policy.model.model.layers[0].self_attn.k_proj.weight.data * 3.0
    )
    gen.forget_prefixes()
    reused = gen.prefill_tokens[1]
    after = gen.run_batch(turn2, seeds=[4, 5, 6], temperature=1.0, max_new_tokens=8)
    assert gen.prefill_tokens[1] == reused
    assert [d.ids for d in after] == [
        d.ids
        for d in _generator(policy, prefix_bytes=0).run_batch(turn2, seeds=[4, 5, 6], temperature=1.0, max_new_tokens=8)
    ]


def test_set_lane_threads_sets_the_decoding_threads_own_torch_threads(tiny_model_dir: Path) -> None:
    """torch.set_num_threads acts on the calling thread only; a lane applies set_lane_threads on its own thread
    before each batch and between its steps (the driver gives cores to training processes this way) and None restores
    its own."""
    from gapforge.serving import batching

    policy = LocalPolicy(tiny_model_dir)
    gen = _generator(policy)
    seen: list[int] = []  # the count each step ran with (a request may join a batch still decoding: checked per step)

    def counted(generator: BatchGenerator) -> BatchGenerator:
        sample = generator._sample

        def sampled(*args: Any) -> Any:
            seen.append(torch.get_num_threads())
            return sample(*args)

        generator._sample = sampled  # type: ignore[method-assign]
        return generator

    counted(gen)
    main = torch.get_num_threads()
    prompt = _ids(policy)[0]
    try:
        gen.submit(prompt, temperature=0.0, max_new_tokens=2, seed=0).result(60)  # the lane's own count
        last = [seen[-1]]
        for threads in (1, 3, None):
            batching.set_lane_threads(threads)
            gen.submit(prompt, temperature=0.0, max_new_tokens=2, seed=0).result(60)
            last.append(seen[-1])
    finally:
        batching.set_lane_threads(None)
    own = last[0]
    assert last == [own, 1, 3, own] and torch.get_num_threads() == main
    # a lane that runs lowered also lowers the count threads started later begin with: a new lane after it
    # still decodes with the process's own count once the lowering is lifted
    batching.set_lane_threads(1)
    gen.submit(prompt, temperature=0.0, max_new_tokens=2, seed=0).result(60)
    lowered = seen[-1]
    batching.set_lane_threads(None)
    later = counted(_generator(policy))
    try:
        later.submit(prompt, temperature=0.0, max_new_tokens=2, seed=0).result(60)
    finally:
        later.close()
        gen.close()
    assert [lowered, seen[-1]] == [1, batching._DEFAULT_THREADS[0]]
    with pytest.raises(ValueError, match="threads must be >= 1"):
        batching.set_lane_threads(0)


def test_a_decoding_model_keeps_the_main_thread_serial_and_its_lanes_at_the_processs_count(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built on the main thread, a local policy leaves that thread 1 torch thread (a parallel op there would make a
    second OpenMP team, and the lane's decoding would slow 1.5x), and its lane decodes with the count the main thread
    had. Built on another thread, it leaves that thread's count alone."""
    from gapforge.serving import batching

    monkeypatch.setattr(batching, "_DEFAULT_THREADS", [None])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        elsewhere: list[int] = []

        def build() -> None:
            torch.set_num_threads(2)
            LocalPolicy(tiny_model_dir)
            elsewhere.append(torch.get_num_threads())

        thread = threading.Thread(target=build)
        thread.start()
        thread.join()
        assert elsewhere == [2] and batching._DEFAULT_THREADS == [None]
        policy = LocalPolicy(tiny_model_dir)
        assert torch.get_num_threads() == 1 and batching._DEFAULT_THREADS == [2]
        gen = _generator(policy)
        seen: list[int] = []
        sample = gen._sample

        def sampled(*args: Any) -> Any:
            seen.append(torch.get_num_threads())
            return sample(*args)

        gen._sample = sampled  # type: ignore[method-assign]
        try:
            gen.submit(_ids(policy)[0], temperature=0.0, max_new_tokens=2, seed=0).result(60)
        finally:
            gen.close()
        assert seen and set(seen) == {2}
    finally:
        torch.set_num_threads(before)


def test_a_batch_waits_while_a_model_is_being_loaded(tiny_model_dir: Path) -> None:
    """transformers builds a model under process-wide state: a decode on another thread meanwhile saw meta
    tensors. model_loading() holds new batches off until the load is done; then they run as before."""
    from concurrent.futures import TimeoutError as FutureTimeout

    from gapforge.serving.batching import model_loading

    policy = LocalPolicy(tiny_model_dir)
    gen = _generator(policy)
    prompt = _ids(policy)[0]
    alone = gen.run_batch([prompt], seeds=[0], temperature=0.0, max_new_tokens=4)[0].ids
    try:
        with model_loading():
            pending = gen.submit(prompt, temperature=0.0, max_new_tokens=4, seed=0)
            with pytest.raises(FutureTimeout):
                pending.result(timeout=0.5)  # held off: the load is not done
        assert pending.result(timeout=60) == alone
    finally:
        gen.close()


def test_a_request_that_arrives_while_a_batch_decodes_joins_it_and_each_row_is_answered_when_it_ends(
    tiny_model_dir: Path,
) -> None:
    """Continuous batching: B, submitted while A decodes, joins A's batch at the next step (one forward for both, the
    cache widened to the longer prompt) instead of waiting for A to finish; B is answered as soon as its own tokens are
    out, while A goes on; each gets the tokens it gets alone."""
    policy = LocalPolicy(tiny_model_dir)
    short, long = _ids(policy)[0], _ids(policy)[1] + _ids(policy)[2]  # B's prompt is longer: the running cache widens
    alone = BatchGenerator(policy.model, eos_ids={-1})
    want_a = alone.run_batch([short], seeds=[1], temperature=0.0, max_new_tokens=40)[0].ids
    want_b = alone.run_batch([long], seeds=[2], temperature=0.0, max_new_tokens=6)[0].ids
    gen = BatchGenerator(policy.model, eos_ids={-1})  # no eos: A decodes its 40 tokens
    order: list[str] = []
    submitted: list[Any] = []

    sample = gen._sample

    def mid_decode(*args: Any) -> Any:  # on the lane's thread, during A's 5th decode step
        if len(gen.step_rows) == 5 and not submitted:
            submitted.append(gen.submit(long, temperature=0.0, max_new_tokens=6, seed=2))
            submitted[0].add_done_callback(lambda f: order.append("B"))
        return sample(*args)

    gen._sample = mid_decode  # type: ignore[method-assign]
    try:
        a = gen.submit(short, temperature=0.0, max_new_tokens=40, seed=1)
        a.add_done_callback(lambda f: order.append("A"))
        got_a = a.result(60)
        got_b = submitted[0].result(60)
    finally:
        gen.close()
    assert (got_a, got_b) == (want_a, want_b)
    assert order == ["B", "A"]  # B did not wait for A's last 30 tokens
    assert 2 in gen.step_rows and gen.batch_sizes == [2]  # one batch held both
