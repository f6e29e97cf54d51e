"""The engine's forward (serving.fast_forward): logits equal to the bit to the model's own forward in every case the
engine uses it (prefill from scratch and on a kept prefix, decode steps with and without padded rows, LoRA adapters
active, switched or disabled), the same tokens and logprobs through the engine either way, and transformers' path
wherever the fast one does not apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from gapforge.serving import batching
from gapforge.serving.batching import BatchGenerator
from gapforge.serving.fast_forward import FastForward, attention_windows

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _model(path: Path, **kw: Any) -> Any:
    return AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, **kw).eval()


def _lora(path: Path, names: tuple[str, ...] = ("a",), targets: list[str] = TARGETS) -> Any:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0)
    model = get_peft_model(_model(path), config, adapter_name=names[0])
    for name in names[1:]:
        model.add_adapter(name, config)
    with torch.no_grad():
        for i, (key, p) in enumerate(model.named_parameters()):
            if "lora_B" in key:  # a fresh adapter's B is 0: give every adapter a real (and different) delta
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.2)
    return model.eval()


def _ids(n: int, seed: int, vocab: int = 500) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, vocab, (n,), generator=g).tolist()


def _padded_step(model: Any, width: int, starts: list[int], *, copies: int) -> tuple[Any, Any, Any, list[Any], Any]:
    """Rows of `width` columns, row i left-padded up to `starts[i]`, prefilled by the model into `copies` slot caches
    (the first then decodes one step through the model): the step's token, positions, attention mask (rows,
    width + 1), the caches and the model's own output for that step."""
    rows = len(starts)
    ids = torch.tensor([_ids(width, 10 + r) for r in range(rows)])
    attention = (torch.arange(width + 1)[None] >= torch.tensor(starts)[:, None]).long()
    token, position = torch.tensor([[11]] * rows), torch.tensor([[width - s] for s in starts])
    caches = []
    for _ in range(copies):
        cache = DynamicCache()
        model(
            input_ids=ids,
            attention_mask=attention[:, :-1],
            position_ids=(torch.arange(width)[None] - torch.tensor(starts)[:, None]).clamp(min=0),
            past_key_values=cache,
            use_cache=True,
        )
        batching._reserve(cache, 4)
        caches.append(cache)
    want = model(
        input_ids=token,
        attention_mask=attention,
        position_ids=position,
        past_key_values=caches[0],
        use_cache=True,
        logits_to_keep=1,
    )
    return token, position, attention, caches, want


def _check_logits(model: Any) -> None:
    fast = FastForward.of(model)
    assert fast is not None and fast.usable()
    fast.bind()
    context = _ids(40, 1)
    with torch.no_grad():
        whole = model(input_ids=torch.tensor([context]), use_cache=True, logits_to_keep=1)
        got = fast.prefill([(context, None, 0)])[0]
        assert torch.equal(got.logits, whole.logits)
        for a, b in zip(got.past_key_values.layers, whole.past_key_values.layers):
            assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
        kept = [(layer.keys, layer.values) for layer in whole.past_key_values.layers]
        for start in (30, 39):  # ten new tokens on a kept prefix; one new token (a decode step without padding)
            want = model(
                input_ids=torch.tensor([context[start:]]),
                use_cache=True,
                logits_to_keep=1,
                past_key_values=DynamicCache(ddp_cache_data=[(k[:, :, :start], v[:, :, :start]) for k, v in kept]),
            )
            assert torch.equal(fast.prefill([(context[start:], kept, start)])[0].logits, want.logits)
        for starts in ([0, 7, 3], [0, 0, 0], [0]):  # padded rows; none padded; one row
            token, position, attention, caches, want = _padded_step(model, 40, starts, copies=2)
            mask = attention.bool()[:, None, None, :] if any(starts) else None
            assert torch.equal(fast.decode(token, position, caches[1].layers, mask), want.logits), starts
            assert all(torch.equal(a.keys, b.keys) for a, b in zip(caches[0].layers, caches[1].layers))


def test_a_padded_step_over_long_rows_reads_only_their_blocks_with_the_same_logits(tiny_model_dir: Path) -> None:
    """Rows of 1,300 to 10 real columns in one step: each run of rows attends from the key block its first real column
    is in (attention_windows), and the logits equal the whole padded step's and the model's own, to the bit."""
    model = _model(tiny_model_dir)
    fast = FastForward.of(model)
    assert fast is not None
    fast.bind()
    width, starts = 1300, [0, 600, 1100, 1150, 1290, 20]
    windows = attention_windows(starts, torch.float32)
    assert windows == [(0, 1, 0), (1, 2, 512), (2, 5, 1024), (5, 6, 0)]
    with torch.no_grad():
        token, position, attention, caches, want = _padded_step(model, width, starts, copies=3)
        mask = attention.bool()[:, None, None, :]
        read, sdpa = [], fast._sdpa

        def recorded(q: Any, k: Any, v: Any, m: Any, causal: bool = False) -> Any:
            read.append(k.shape[2])
            return sdpa(q, k, v, m, causal)

        fast._sdpa = recorded  # type: ignore[method-assign]
        windowed = fast.decode(token, position, caches[1].layers, mask, None, windows)
        del fast._sdpa
        whole = fast.decode(token, position, caches[2].layers, mask)
    assert read == [1301, 789, 277, 1301] * len(caches[1].layers)  # each run read its own columns only
    assert torch.equal(windowed, whole) and torch.equal(windowed, want.logits)


def test_logits_equal_the_models_own_forward(tiny_model_dir: Path) -> None:
    _check_logits(_model(tiny_model_dir))


def test_logits_equal_peft_with_adapters_active_switched_and_disabled(tiny_model_dir: Path) -> None:
    model = _lora(tiny_model_dir, ("a", "b"))
    _check_logits(model)
    model.set_adapter("b")
    _check_logits(model)
    with model.disable_adapter():
        _check_logits(model)


def _turns(model: Any, fast: bool, prompts: list[list[int]], temperature: float) -> list[Any]:
    gen = BatchGenerator(model, eos_ids={-1}, fast=fast)
    out, contexts = [], [list(p) for p in prompts]
    for turn in range(3):  # later turns prefill on the kept prefixes of the earlier ones
        decoded = gen.run_batch(
            contexts, seeds=[7 * r + turn for r in range(len(contexts))], temperature=temperature, max_new_tokens=12
        )
        out.append([(d.ids, d.logprobs) for d in decoded])
        contexts = [c + d.ids + _ids(5, turn) for c, d in zip(contexts, decoded)]
    assert gen.prefill_tokens[1] > 0
    return out


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_engine_samples_the_same_tokens_and_logprobs_either_way(tiny_model_dir: Path, temperature: float) -> None:
    prompts = [_ids(n, n) for n in (9, 30, 17, 4)]  # different lengths: rows padded, the cache widened
    for model in (_model(tiny_model_dir), _lora(tiny_model_dir)):
        assert _turns(model, True, prompts, temperature) == _turns(model, False, prompts, temperature)


def test_the_engine_uses_it_and_falls_back_where_it_does_not_apply(tiny_model_dir: Path) -> None:
    model = _model(tiny_model_dir)
    calls: list[int] = []
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    BatchGenerator(model, eos_ids={-1}).run_batch(
        [_ids(8, 1), _ids(5, 2)], seeds=[1, 2], temperature=1.0, max_new_tokens=6
    )
    assert calls == []  # every prefill and decode step went through the fast forward
    BatchGenerator(model, eos_ids={-1}, fast=False).run_batch(
        [_ids(8, 1)], seeds=[1], temperature=1.0, max_new_tokens=6
    )
    assert len(calls) == 6  # one prefill, five decode steps

    model.train()  # dropout would act: not for the fast forward
    assert not FastForward.of(model).usable()
    assert FastForward.of(_model(tiny_model_dir, attn_implementation="eager")) is None  # other attention numerics
    assert FastForward.of(_lora(tiny_model_dir, targets=["q_proj", "embed_tokens"])) is None  # a LoRA it does not apply
    eager = _model(tiny_model_dir, attn_implementation="eager")
    calls.clear()
    eager.register_forward_pre_hook(lambda module, args: calls.append(1))
    got = (
        BatchGenerator(eager, eos_ids={-1}).run_batch([_ids(8, 1)], seeds=[1], temperature=0.0, max_new_tokens=6)[0].ids
    )
    assert len(calls) == 6 and len(got) == 6


def _saved_adapter(path: Path, out: Path, seed: int) -> Path:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, task_type="CAUSAL_LM")
    model = get_peft_model(_model(path), config)
    with torch.no_grad():
        for i, (key, p) in enumerate(model.named_parameters()):
            if "lora_" in key:  # deltas large enough that each adapter answers differently
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1000 * seed + i)) * 2.0)
    model.save_pretrained(out)
    return out


async def test_rows_of_different_adapters_decode_in_one_batch_each_with_its_own(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A MultiAdapterModel's batch takes the rows of every adapter (and the base) at once: each row gets its own
    adapter's LoRA, so every answer equals the one its adapter gives alone, and the decode steps hold every group's
    rows (one group at a time before: a group waited for the other's batch to drain)."""
    import asyncio

    from gapforge.envs.protocol import Message
    from gapforge.envs.sampling import episode_key
    from gapforge.serving.multi_adapter import MultiAdapterModel

    adapters = {name: _saved_adapter(tiny_model_dir, tmp_path / name, seed) for name, seed in (("a", 1), ("b", 2))}
    conv = [Message.user("Where is my order #W1234567?")]
    calls = [(f"t{i}#0", adapter) for i in range(3) for adapter in (None, "a", "b")]

    async def one(backend: MultiAdapterModel, key: str, adapter: str | None) -> Message:
        token = episode_key.set(key)
        try:
            return await backend.respond(conv, [], adapter=adapter, temperature=1.0)
        finally:
            episode_key.reset(token)

    results, widest = [], []
    for fast in (True, False):
        backend = MultiAdapterModel(tiny_model_dir, adapters, max_new_tokens=16, mix_adapters=True)
        backend._generation.batcher.fast = fast
        assert backend._generation.batcher.mixes() is fast
        alone = [await one(backend, k, a) for k, a in calls]
        backend._generation.batcher.step_rows.clear()
        together = await asyncio.gather(*(one(backend, k, a) for k, a in calls))
        assert list(together) == alone
        widest.append(max(backend._generation.batcher.step_rows))
        results.append(alone)
        await backend.aclose()
    assert results[0] == results[1]  # the same answers through either forward
    assert len({repr(m) for m in results[0][:3]}) > 1  # the adapters change answers (their logits: the test below)
    assert widest[0] > 3 >= widest[1]  # mixed: one batch held more than one group's three rows; grouped: never


def test_decode_with_rows_of_mixed_adapters_matches_each_adapter_alone(tiny_model_dir: Path) -> None:
    from gapforge.serving.fast_forward import rows_of

    model = _lora(tiny_model_dir, ("a", "b"))
    fast = FastForward.of(model)
    width, rows = 30, 8
    adapters = [None, "a", "b", "a", None, "b", "b", "a"]
    ids = torch.tensor([_ids(width, 20 + r) for r in range(rows)])
    token, position = torch.tensor([[11]] * rows), torch.full((rows, 1), width)
    alone, caches = {}, {}
    with torch.no_grad():
        for name in (None, "a", "b"):  # every row's context and next step under one adapter (or the base)
            caches[name] = DynamicCache()
            with model.disable_adapter() if name is None else _active(model, name):
                model(input_ids=ids, past_key_values=caches[name], use_cache=True)
                keep = [(layer.keys.clone(), layer.values.clone()) for layer in caches[name].layers]
                batching._reserve(caches[name], 4)
                fast.bind()
                alone[name] = fast.decode(token, position, caches[name].layers, None)
            caches[name] = keep
        mixed_cache = DynamicCache(
            ddp_cache_data=[
                (
                    torch.cat([caches[a][i][0][r : r + 1] for r, a in enumerate(adapters)]),
                    torch.cat([caches[a][i][1][r : r + 1] for r, a in enumerate(adapters)]),
                )
                for i in range(len(caches["a"]))
            ]
        )
        batching._reserve(mixed_cache, 4)
        fast.bind()
        mixed = fast.decode(token, position, mixed_cache.layers, None, rows_of(adapters))
    for name in (None, "a", "b"):
        index = [i for i, a in enumerate(adapters) if a == name]
        assert torch.allclose(mixed[index], alone[name][index], atol=1e-5)
        others = [i for i, a in enumerate(adapters) if a != name]
        assert not torch.allclose(
            mixed[others], alone[name][others], atol=1e-3
        )  # the other rows did not take this adapter


def _active(model: Any, name: str) -> Any:
    import contextlib

    model.set_adapter(name)
    return contextlib.nullcontext()


def _tiny_qwen2(path: Path) -> Path:
    """A tiny Qwen2 (q/k/v biases, no q/k norms, no head_dim in its config) beside the tiny Qwen3's tokenizer."""
    import shutil

    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=_model(path).config.vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    assert getattr(config, "head_dim", None) is None
    torch.manual_seed(0)
    out = path.parent / f"{path.name}-qwen2"
    Qwen2ForCausalLM(config).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (path / name).is_file():
            shutil.copy(path / name, out / name)
    return out


def test_a_qwen2_model_and_a_bf16_base_with_fp32_adapters_match_too(tiny_model_dir: Path) -> None:
    qwen2 = _model(_tiny_qwen2(tiny_model_dir))
    _check_logits(qwen2)
    bf16 = _lora(tiny_model_dir)  # PEFT keeps the adapter in fp32 on a bf16 base, casts x to it and the sum back
    bf16.base_model.model.to(torch.bfloat16)
    for name, p in bf16.named_parameters():
        if "lora_" in name:
            p.data = p.data.float()
    assert {p.dtype for n, p in bf16.named_parameters() if "lora_" in n} == {torch.float32}
    _check_logits(bf16)


def test_models_it_does_not_take_go_to_transformers(tiny_model_dir: Path) -> None:
    from peft import IA3Config, LoraConfig, get_peft_model

    merged = _lora(tiny_model_dir)
    merged.merge_adapter()
    biased = get_peft_model(_model(tiny_model_dir), LoraConfig(r=4, target_modules=TARGETS, lora_bias=True))
    saved = get_peft_model(_model(tiny_model_dir), LoraConfig(r=4, target_modules=TARGETS, modules_to_save=["lm_head"]))
    ia3 = get_peft_model(
        _model(tiny_model_dir),
        IA3Config(target_modules=["k_proj", "v_proj", "down_proj"], feedforward_modules=["down_proj"]),
    )
    for model in (merged, biased, saved, ia3):
        assert FastForward.of(model) is None
    merged.unmerge_adapter()
    assert FastForward.of(merged) is not None  # checked at every batch: a merge done later is seen


def test_a_batch_formed_to_mix_adapters_decodes_group_by_group_when_it_cannot(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A mixing lane formed the batch, then the model stopped being one the fast forward takes (here: fast off):
    every row still gets its own adapter, group by group with the adapter selected."""
    from gapforge.serving.batching import _request
    from gapforge.serving.multi_adapter import MultiAdapterModel

    backend = MultiAdapterModel(
        tiny_model_dir, {"a": _saved_adapter(tiny_model_dir, tmp_path / "a", 1)}, max_new_tokens=8, mix_adapters=True
    )
    gen = backend._generation.batcher
    prompts = [_ids(9, 1), _ids(6, 2), _ids(9, 1)]
    groups = [None, "a", "a"]
    alone = [
        gen.run_batch([p], seeds=[s], temperature=1.0, max_new_tokens=8, group=g)[0].ids
        for s, (p, g) in enumerate(zip(prompts, groups))
    ]
    gen.fast = False
    got = gen._decode([_request(p, 1.0, 8, s, g) for s, (p, g) in enumerate(zip(prompts, groups))], mixing=True)
    assert [d.ids for d in got] == alone and alone[0] != alone[
        2
    ]  # the base row and the adapter row differ: each had its own


def test_a_running_batch_stops_admitting_while_someone_waits_for_the_model(tiny_model_dir: Path) -> None:
    from gapforge.serving.batching import _Lane, _request

    gen = BatchGenerator(_model(tiny_model_dir), eos_ids={-1})
    lane = _Lane(gen)
    lane.queue.put(_request(_ids(5, 1), 1.0, 4, 1, None))
    gen.exclusive_waiting = 1
    assert lane.more(None, 8) == []
    gen.exclusive_waiting = 0
    assert len(lane.more(None, 8)) == 1


def test_no_windows_where_the_kernel_would_round_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key block that is not the kernel's (windows from multiples of 100 split its blocks elsewhere): the check finds
    unequal attention, and a step attends every column."""
    from gapforge.serving import fast_forward

    monkeypatch.setattr(fast_forward, "_KV_BLOCK", 100)
    monkeypatch.setattr(fast_forward, "_WINDOW_BLOCK", {})
    assert attention_windows([0, 600, 1100], torch.float32) is None
    monkeypatch.setattr(fast_forward, "_KV_BLOCK", 512)
    monkeypatch.setattr(fast_forward, "_WINDOW_BLOCK", {})
    assert attention_windows([0, 600, 1100], torch.float32) == [(0, 1, 0), (1, 2, 512), (2, 3, 1024)]
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]):  # the math kernel rounds otherwise: one window
        assert attention_windows([0, 600, 1100], torch.float32) is None


def test_the_engine_decodes_long_rows_as_transformers_does(tiny_model_dir: Path) -> None:
    """Prompts of 1,400, 700 and 60 tokens in one batch: the engine's forward (windows over the long rows' padding)
    samples the tokens and logprobs of transformers' own forward."""
    model = _model(tiny_model_dir)
    prompts = [_ids(1400, 1), _ids(700, 2), _ids(60, 3)]
    runs = []
    for fast in (True, False):
        gen = BatchGenerator(model, eos_ids=set(), fast=fast)
        try:
            got = gen._decode([batching._request(p, 1.0, 12, s, None) for s, p in enumerate(prompts)])
        finally:
            gen.close()
        runs.append([(d.ids, d.logprobs) for d in got])
    assert runs[0] == runs[1]
