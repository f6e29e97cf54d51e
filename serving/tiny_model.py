"""A tiny Qwen-architecture causal LM built offline, for tests and the offline demo.

`build_tiny_model(path, seed=0)` writes a model directory that `AutoModelForCausalLM.from_pretrained(path)` and
`AutoTokenizer.from_pretrained(path)` load with no hub access: random (seeded) Qwen3 weights, a byte-level BPE
tokenizer trained on the spot on a small built-in chat/tool-call corpus (tiny_corpus.txt), the Qwen special tokens,
and a Qwen3-style chat template (chat_template.jinja). The same seed gives the same files. demo_policy.teach builds
the demo's base policy with the same tokenizer and config makers (`bpe_tokenizer`, `qwen3_config`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gapforge.serving.errors import ServingError

# Special (control) tokens: dropped by decode(skip_special_tokens=True).
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Tags the model writes as text; kept by decode so tool calls can be parsed.
TAG_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
CORPUS_PATH = Path(__file__).with_name("tiny_corpus.txt")


@dataclass(frozen=True)
class TinyModelSpec:
    """Sizes of the tiny model; defaults build in well under a second on CPU."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    max_positions: int = 8192
    vocab_size: int = 2048  # BPE target; the real size is what the corpus supports


def chat_template() -> str:
    """The Qwen3-style chat template shipped with the tiny model."""
    return Path(__file__).with_name("chat_template.jinja").read_text(encoding="utf-8")


def bpe_tokenizer(
    texts: list[str],
    vocab_size: int,
    template: str,
    *,
    min_frequency: int = 1,
    digits: Any = None,
    check: Callable[[Any], None] | None = None,
    max_positions: int = TinyModelSpec.max_positions,
    special_tokens: tuple[str, ...] = SPECIAL_TOKENS,
    **tokens: str | None,
) -> Any:
    """A byte-level BPE tokenizer trained on `texts` (`digits`: a pre-tokenizer before the byte level; `check(backend)`
    runs on the trained one), with `special_tokens` and TAG_TOKENS added, wrapped for transformers (left padding).
    `tokens`: eos_token, pad_token (Qwen's by default), bos_token."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.pre_tokenizer = pre_tokenizers.Sequence([digits, byte_level]) if digits is not None else byte_level
    backend.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, initial_alphabet=alphabet, show_progress=False
    )
    backend.train_from_iterator(texts, trainer=trainer)
    if check is not None:
        check(backend)
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    tokens = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", **tokens}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, model_max_length=max_positions, padding_side="left", **tokens
    )
    tokenizer.chat_template = template
    return tokenizer


def build_tokenizer(
    vocab_size: int = 2048, *, template: str | None = None, bos_token: str | None = None, **kwargs: Any
) -> Any:
    """`bpe_tokenizer` on the built-in corpus. Defaults: Qwen's special tokens and the tiny chat template; another
    family's control tokens (`special_tokens`), eos, pad, bos and template can be given (tests render real templates
    of Llama 3.x this way)."""
    corpus = CORPUS_PATH.read_text(encoding="utf-8").splitlines()
    template = template if template is not None else chat_template()
    return bpe_tokenizer(corpus, vocab_size, template, bos_token=bos_token, **kwargs)  # bos None is written too


def qwen3_config(tokenizer: Any, spec: TinyModelSpec) -> Any:
    """A Qwen3 config of `spec`'s sizes for `tokenizer` (tied embeddings, eos <|im_end|>, pad <|endoftext|>)."""
    from transformers import Qwen3Config

    eos, pad = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")
    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.hidden_size // spec.num_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        eos_token_id=eos,
        pad_token_id=pad,
        bos_token_id=None,
    )


def generation_config(tokenizer: Any) -> Any:
    """Generation stops at <|im_end|> or <|endoftext|>."""
    from transformers import GenerationConfig

    eos, pad = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")
    return GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad)


def build_tiny_model(
    path: str | Path, seed: int = 0, spec: TinyModelSpec | None = None, *, template: str | None = None
) -> Path:
    """Build the tiny model + tokenizer and save both to `path` (created if missing). `template`: another chat
    template than the tiny one, e.g. Qwen3's stock text (serving.chat_format.stock_template("qwen3")): the
    tokenizer has Qwen's control tokens and <think> / <tool_call> / <tool_response> tags, as Qwen3's has."""
    import torch
    from transformers import Qwen3ForCausalLM

    spec = spec or TinyModelSpec()
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ServingError(f"{out} is a file; give a directory path for the tiny model")
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec.vocab_size, template=template)
    config = qwen3_config(tokenizer, spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config = generation_config(tokenizer)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
