"""A tiny Qwen-architecture causal LM built offline, for tests and the offline demo.

`build_tiny_model(path, seed=0)` writes a model directory that
`AutoModelForCausalLM.from_pretrained(path)` and `AutoTokenizer.from_pretrained(path)`
load with no hub access: random (seeded) Qwen3 weights, a byte-level BPE tokenizer
trained on the spot on a small built-in chat/tool-call corpus (tiny_corpus.txt),
the Qwen special tokens, and a Qwen3-style chat template (chat_template.jinja).
The same seed gives the same files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gapforge.serving.errors import ServingError

# Special (control) tokens: dropped by decode(skip_special_tokens=True).
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Tags the model writes as text; kept by decode so tool calls can be parsed.
TAG_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")

_HERE = Path(__file__).parent
CHAT_TEMPLATE_PATH = _HERE / "chat_template.jinja"
CORPUS_PATH = _HERE / "tiny_corpus.txt"


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
    return CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")


def build_tokenizer(
    vocab_size: int = 2048,
    *,
    special_tokens: tuple[str, ...] = SPECIAL_TOKENS,
    eos_token: str = "<|im_end|>",
    pad_token: str = "<|endoftext|>",
    bos_token: str | None = None,
    template: str | None = None,
):
    """Train a byte-level BPE tokenizer on the built-in corpus and wrap it for transformers. Defaults: Qwen's
    special tokens and the tiny chat template; another family's control tokens, eos and template can be given
    (tests render real templates of Llama 3.x this way)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = CORPUS_PATH.read_text(encoding="utf-8").splitlines()
    backend.train_from_iterator(corpus, trainer=trainer)
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=eos_token,
        pad_token=pad_token,
        bos_token=bos_token,
        model_max_length=TinyModelSpec.max_positions,
        padding_side="left",
    )
    tokenizer.chat_template = template if template is not None else chat_template()
    return tokenizer


def build_tiny_model(
    path: str | Path, seed: int = 0, spec: TinyModelSpec | None = None, *, template: str | None = None
) -> Path:
    """Build the tiny model + tokenizer and save both to `path` (created if missing). `template`: another chat
    template than the tiny one, e.g. Qwen3's stock text (serving.chat_format.stock_template("qwen3")): the
    tokenizer has Qwen's control tokens and <think> / <tool_call> / <tool_response> tags, as Qwen3's has."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    spec = spec or TinyModelSpec()
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ServingError(f"{out} is a file; give a directory path for the tiny model")
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = build_tokenizer(spec.vocab_size, template=template)
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.hidden_size // spec.num_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=[eos_id, pad_id], pad_token_id=pad_id)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
