"""The engine's forward for Qwen-family models as plain tensor ops: the same ops transformers and PEFT run, in the
same order, without their per-call machinery (decorators, output records, mask builders, cache classes, PEFT's
per-layer checks), over the engine's slot buffers.

On the shipped ~1M-parameter policy a decode step is a few hundred small ops, and that machinery cost as much as the
ops: a decode step 1.2-1.6x cheaper at 8-64 rows (docs/experiments/engine.md), with logits equal to the bit (tested
against `model(...)` for every case below, adapters included). It reproduces exactly what transformers' SDPA path
does:

- a decode step: with left padding, a boolean mask (rows, 1, 1, columns) and the query packed by key/value head, each
  run of rows from the first key block it has a real column in (`attention_windows`: the same logits); without any
  padding, no mask and grouped-query SDPA;
- a prefill from scratch: causal SDPA without a mask; on a kept prefix: an explicit causal mask and the key/value
  heads repeated.

`FastForward.of(model)` is None for anything else (`_takes`: another architecture, attention implementation or rope
type; a LoRA variant, bias, merge or placement it does not know, another tuner, a wrapped module; and it is not used
in training mode): the engine then calls the model as before. Rows of several adapters in one forward (`rows_of`)
each get their own adapter's LoRA, computed on their rows only: equal to each adapter alone up to float rounding.
Weights are read when a batch starts (`bind`), after the batch's adapter was selected: in-place training updates are
seen, and so is the adapter a `select` context switched to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


def _rms(x: Any, weight: Any, eps: float) -> Any:
    import torch

    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def _rotated(x: Any, cos: Any, sin: Any) -> Any:
    import torch

    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class _Linear:
    """A (LoRA-wrapped or plain) nn.Linear's forward: the base projection, then each active adapter's B(A(x)) * scale.
    With `rows` (mixed adapters): each adapter's B(A(x)) * scale added to its own rows only."""

    __slots__ = ("weight", "bias", "loras", "every")

    def __init__(self, module: Any) -> None:
        base, self.loras, self.every = module, [], {}
        if hasattr(module, "base_layer"):
            base = module.base_layer
            self.every = {
                a: (module.lora_A[a].weight, module.lora_B[a].weight, module.scaling[a]) for a in module.lora_A.keys()
            }
            if not module.disable_adapters and not module.merged:
                self.loras = [self.every[a] for a in module.active_adapters if a in self.every]
        self.weight, self.bias = base.weight, base.bias

    def __call__(self, x: Any, rows: Rows | None = None) -> Any:
        import torch.nn.functional as F

        out = F.linear(x, self.weight, self.bias)
        dtype = out.dtype
        if rows is None:  # as PEFT: x cast to the adapter's dtype (fp32 LoRA on a bf16 base), the sum cast back
            for a, b, scale in self.loras:
                out = out + F.linear(F.linear(x.to(a.dtype), a), b) * scale
            return out.to(dtype)
        for adapter, index in rows:
            if adapter in self.every:
                a, b, scale = self.every[adapter]
                if index is None:  # every row
                    out = out + F.linear(F.linear(x.to(a.dtype), a), b) * scale
                else:
                    delta = F.linear(F.linear(x[index].to(a.dtype), a), b) * scale
                    out = out.to(delta.dtype).index_add(0, index, delta)
        return out.to(dtype)


# (adapter name, the rows' index tensor or None for every row): mixed adapters in one forward
Rows = list[tuple[Any, Any]]
# (first row, end row, first column): the rows a..b-1 of a decode step attend the columns c.. only
Windows = list[tuple[int, int, int]]

# torch's CPU attention kernel walks the keys in blocks of this many columns from the first one it is given; a fully
# masked block adds exact zeros, so a row's attention over the columns from a multiple of it on equals its attention over
# all of them, to the bit (checked on this torch once per process: _window_block)
_KV_BLOCK = 512
_WINDOW_BLOCK: dict[Any, int | None] = {}  # per dtype


def _window_block(dtype: Any) -> int | None:
    """`_KV_BLOCK` when it is the key block of this torch's flash kernel for `dtype`: windows starting at its
    multiples give the same attention to the bit on a few random padded batches of short and long caches (checked once
    per process; the block does not depend on the rows, heads or head size), else None."""
    if dtype in _WINDOW_BLOCK:
        return _WINDOW_BLOCK[dtype]
    import torch
    import torch.nn.functional as F

    gen, same = torch.Generator().manual_seed(0), True
    for rows, columns in ((3, 700), (5, 1500), (2, 2600)):
        q = torch.randn(rows, 2, 2, 32, generator=gen).to(dtype)
        k, v = torch.randn(2, rows, 2, columns, 32, generator=gen).to(dtype)
        starts = torch.randint(0, columns, (rows,), generator=gen)
        mask = (torch.arange(columns)[None, :] >= starts[:, None])[:, None, None, :]
        whole = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        for r in range(rows):
            c = int(starts[r]) // _KV_BLOCK * _KV_BLOCK
            part = F.scaled_dot_product_attention(
                q[r : r + 1], k[r : r + 1, :, c:], v[r : r + 1, :, c:], attn_mask=mask[r : r + 1, :, :, c:]
            )
            same = same and torch.equal(part, whole[r : r + 1])
    _WINDOW_BLOCK[dtype] = _KV_BLOCK if same else None
    return _WINDOW_BLOCK[dtype]


def attention_windows(starts: list[int], dtype: Any) -> Windows | None:
    """For a padded decode step whose row i's real columns begin at `starts[i]`: runs of consecutive rows, each
    attending from the last multiple of the kernel's key block at or before its rows' first real column. A decode step
    over long, unevenly filled rows reads the padding's keys and values as well (57% of the columns at 32 shop
    episodes): this skips the whole blocks of it, with the same logits (docs/experiments/engine.md: one call per run
    beat capping the calls by merging runs). None: one window (SDPA's flash kernel is off, or it does not give equal
    results for the cache's `dtype` here)."""
    import torch

    block = _window_block(dtype) if torch.backends.cuda.flash_sdp_enabled() else None  # the flag covers the CPU kernel
    if block is None:
        return None
    windows: Windows = []
    for i, start in enumerate(starts):
        c = start // block * block
        if windows and windows[-1][2] == c:
            windows[-1] = (windows[-1][0], i + 1, c)
        else:
            windows.append((i, i + 1, c))
    return windows


def rows_of(adapters: list[str | None]) -> Rows:
    """Each adapter (None: the base, no LoRA) with the rows it serves, for a forward whose rows mix adapters."""
    import torch

    names = [a for a in dict.fromkeys(adapters) if a is not None]
    if len(names) == 1 and None not in adapters:
        return [(names[0], None)]
    return [(a, torch.tensor([i for i, x in enumerate(adapters) if x == a])) for a in names]


@dataclass
class Prefilled:
    """What `model(...)` returned that the engine reads: the last position's logits and the whole context's cache."""

    logits: Any
    past_key_values: Any


class FastForward:
    def __init__(self, causal_lm: Any) -> None:
        self.lm = causal_lm
        config = causal_lm.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.eps, self.head_dim = (
            config.rms_norm_eps,
            getattr(config, "head_dim", None) or config.hidden_size // self.heads,
        )
        self.gqa = {"enable_gqa": True} if self.heads > self.kv_heads else {}  # transformers passes it only then
        self.scale = self.head_dim**-0.5
        self.inv_freq = causal_lm.model.rotary_emb.inv_freq
        self.layers: list[dict[str, Any]] = []

    @classmethod
    def of(cls, model: Any) -> FastForward | None:
        """The fast forward of `model` (a transformers Qwen2/Qwen3 causal LM, PEFT-wrapped or not), or None."""
        try:
            # PeftModel -> the causal LM
            lm = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
            return cls(lm) if _takes(model, lm) else None
        except Exception:  # noqa: BLE001 - a model shaped otherwise than checked: transformers' own path
            return None

    def usable(self) -> bool:
        """Only for inference: dropout (base or adapter) is a no-op in eval mode and nowhere else."""
        return not self.lm.training

    def bind(self) -> None:
        """Read the weights and the active adapters now (call when a batch starts, under its adapter)."""
        self.layers = []
        for layer in self.lm.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            entry = {name: _Linear(getattr(attn, name)) for name in _LINEARS}
            entry.update({name: _Linear(getattr(mlp, name)) for name in _MLP})
            entry.update(
                ln1=layer.input_layernorm.weight,
                ln2=layer.post_attention_layernorm.weight,
                q_norm=getattr(getattr(attn, "q_norm", None), "weight", None),
                k_norm=getattr(getattr(attn, "k_norm", None), "weight", None),
            )
            self.layers.append(entry)
        self.embed, self.norm = self.lm.model.embed_tokens.weight, self.lm.model.norm.weight
        self.head = _Linear(self.lm.lm_head)

    def _rope(self, positions: Any, dtype: Any) -> tuple[Any, Any]:
        import torch

        freqs = positions[..., None].float() * self.inv_freq.float()
        angles = torch.cat((freqs, freqs), dim=-1)
        return angles.cos().to(dtype)[:, None], angles.sin().to(dtype)[:, None]

    def _qkv(self, entry: dict[str, Any], x: Any, cos: Any, sin: Any, mix: Rows | None) -> tuple[Any, Any, Any]:
        rows, width = x.shape[:2]
        shape = (rows, width, -1, self.head_dim)
        q, k = entry["q_proj"](x, mix).view(shape), entry["k_proj"](x, mix).view(shape)
        if entry["q_norm"] is not None:
            q, k = _rms(q, entry["q_norm"], self.eps), _rms(k, entry["k_norm"], self.eps)
        v = entry["v_proj"](x, mix).view(shape).transpose(1, 2)
        return _rotated(q.transpose(1, 2), cos, sin), _rotated(k.transpose(1, 2), cos, sin), v

    def _block(self, entry: dict[str, Any], h: Any, attend: Any, mix: Rows | None) -> Any:
        import torch.nn.functional as F

        x = _rms(h, entry["ln1"], self.eps)
        h = h + entry["o_proj"](attend(x), mix)
        x = _rms(h, entry["ln2"], self.eps)
        return h + entry["down_proj"](F.silu(entry["gate_proj"](x, mix)) * entry["up_proj"](x, mix), mix)

    def _logits(self, h: Any, mix: Rows | None) -> Any:
        return self.head(_rms(h[:, -1:], self.norm, self.eps), mix)

    def _sdpa(self, q: Any, k: Any, v: Any, mask: Any, causal: bool = False) -> Any:
        """transformers' SDPA call: without a mask grouped-query (`enable_gqa` when it groups), with one as given."""
        import torch.nn.functional as F

        if mask is None:
            return F.scaled_dot_product_attention(
                q, k, v, dropout_p=0.0, scale=self.scale, is_causal=causal, **self.gqa
            )
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, scale=self.scale, is_causal=False)

    def decode(
        self,
        tokens: Any,
        positions: Any,
        layers: list[Any],
        mask: Any,
        mix: Rows | None = None,
        windows: Windows | None = None,
    ) -> Any:
        """One decode step of `tokens` (rows, 1) at `positions` (rows, 1) over slot layers (serving.batching's
        SlotLayer: each `update` writes the new column); `mask` (rows, 1, 1, columns) boolean, or None when no row is
        padded; `mix` (`rows_of`): each row's adapter, else the active one for all; `windows` (`attention_windows`,
        with a mask): the columns each run of rows attends, the same logits as without. Returns the logits
        (rows, 1, vocab)."""
        import torch
        import torch.nn.functional as F

        rows = tokens.shape[0]
        group = self.heads // self.kv_heads
        h = F.embedding(tokens, self.embed)
        cos, sin = self._rope(positions, h.dtype)
        for entry, layer in zip(self.layers, layers, strict=True):

            def attend(x: Any, entry: Any = entry, layer: Any = layer) -> Any:
                q, k, v = self._qkv(entry, x, cos, sin, mix)
                keys, values = layer.update(k, v)
                if mask is not None:  # the query packed by key/value head
                    q = q.reshape(rows, self.kv_heads, group, self.head_dim)
                if mask is None or windows is None:
                    out = self._sdpa(q, keys, values, mask)
                else:  # each run of rows over its own columns: views, nothing copied
                    out = torch.cat(
                        [
                            self._sdpa(q[a:b], keys[a:b, :, c:], values[a:b, :, c:], mask[a:b, :, :, c:])
                            for a, b, c in windows
                        ]
                    )
                return out.reshape(rows, -1, 1, self.head_dim).transpose(1, 2).contiguous().reshape(rows, 1, -1)

            h = self._block(entry, h, attend, mix)
        return self._logits(h, mix)

    def prefill(
        self,
        prompts: list[tuple[list[int], list[tuple[Any, Any]] | None, int]],
        adapters: list[str | None] | None = None,
    ) -> list[Prefilled]:
        """Prompts (new token ids, the kept keys/values per layer of the `start` tokens before them or None, start), each
        in a forward of its own (several in one forward gave 3-5% at 32 episodes, and the matmuls' rounding would then
        depend on the batch), with its adapter from `adapters` (None: the base) or else the active one: per prompt,
        the last logits and a DynamicCache of its whole context."""
        if adapters is None:
            return [self._prefill_one(*prompt, None) for prompt in prompts]
        return [self._prefill_one(*p, rows_of([adapter])) for p, adapter in zip(prompts, adapters, strict=True)]

    def _prefill_one(
        self, ids: list[int], kept: list[tuple[Any, Any]] | None, start: int, mix: Rows | None
    ) -> Prefilled:
        import torch
        import torch.nn.functional as F
        from transformers import DynamicCache

        width = len(ids)
        h = F.embedding(torch.tensor([ids]), self.embed)
        cos, sin = self._rope(torch.arange(start, start + width)[None], h.dtype)
        group = self.heads // self.kv_heads
        mask = (
            None
            if kept is None or width == 1
            else (torch.arange(start + width)[None, :] <= torch.arange(start, start + width)[:, None])[None, None]
        )
        cache: list[tuple[Any, Any]] = []
        for i, entry in enumerate(self.layers):

            def attend(x: Any, entry: Any = entry, i: int = i) -> Any:
                q, k, v = self._qkv(entry, x, cos, sin, mix)
                if kept is not None:
                    k, v = (
                        torch.cat([kept[i][0][:, :, :start], k], dim=-2),
                        torch.cat([kept[i][1][:, :, :start], v], dim=-2),
                    )
                cache.append((k, v))
                if mask is None:  # from scratch (causal), or one new token (a decode step without padding)
                    out = self._sdpa(q, k, v, None, causal=kept is None and width > 1)
                else:
                    out = self._sdpa(q, _repeat(k, group), _repeat(v, group), mask)
                return out.transpose(1, 2).contiguous().reshape(1, width, -1)

            h = self._block(entry, h, attend, mix)
        return Prefilled(self._logits(h, mix), DynamicCache(ddp_cache_data=cache))


def _takes(model: Any, lm: Any) -> bool:
    """Whether the ops here are the model's: a Qwen2/Qwen3 causal LM with SDPA attention, default rope, full attention,
    and (PEFT) only plain, unmerged LoRA on the attention and MLP projections: no prompt learning, no LoRA bias or
    variant (DoRA), no other tuner (IA3, LoHa), no wrapped module (modules_to_save, trainable tokens)."""
    import os

    peft_configs = getattr(model, "peft_config", None) or {}
    if any(getattr(c, "is_prompt_learning", False) for c in peft_configs.values()):
        return False
    config, inner = getattr(lm, "config", None), getattr(lm, "model", None)
    if config is None or getattr(config, "model_type", None) not in ("qwen2", "qwen3") or not hasattr(lm, "lm_head"):
        return False
    rotary = getattr(inner, "rotary_emb", None)
    if getattr(config, "_attn_implementation", None) != "sdpa" or getattr(rotary, "rope_type", "default") != "default":
        return False
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if rotary is None or getattr(config, "use_sliding_window", False) or head_dim > 256:
        return False
    if os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA") == "1":
        return False
    known = {id(getattr(layer.self_attn, n)) for layer in inner.layers for n in _LINEARS}
    known |= {id(getattr(layer.mlp, n)) for layer in inner.layers for n in _MLP}
    for module in lm.modules():
        if hasattr(module, "original_module") or hasattr(module, "token_adapter"):
            return False  # a module PEFT wraps whole (modules_to_save, trainable tokens)
        if hasattr(module, "base_layer"):  # a tuner layer
            plain = type(module).__name__ == "Linear" and hasattr(module, "lora_A") and id(module) in known
            if not plain or module.merged or getattr(module, "lora_variant", None):
                return False
            if any(getattr(module, "lora_bias", {}).values()):
                return False
    return True


def _repeat(t: Any, group: int) -> Any:
    """(rows, kv_heads, len, dim) -> (rows, kv_heads * group, len, dim), each key/value head repeated `group` times."""
    if group == 1:
        return t
    rows, heads, length, dim = t.shape
    return t[:, :, None].expand(rows, heads, group, length, dim).reshape(rows, heads * group, length, dim)
