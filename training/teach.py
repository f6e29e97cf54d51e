"""Teach the tiny base policy of the offline demo (`gapforge dev teach`).

Recipe: gold shop trajectories with the planted deficit (training.teach_data) ->
a byte-level BPE tokenizer trained on them -> a small Qwen3 model (random init) ->
TRL `SFTTrainer` on pre-tokenized examples whose loss covers only the assistant's
tokens. Examples are tokenized exactly like GRPO rollouts (training.tokens: the
prompt, each assistant turn + eos, each env turn as the template delta), so the
taught model sees at training time the same token streams it will produce.
The compact chat template (compact_template.jinja) keeps the context short.

Cached: the output directory is named by a hash of the recipe (config + data
code + template), and a finished build (`teach.json` present) is reused.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from training.tokens import encode, env_delta, render

_HERE = Path(__file__).parent
TEMPLATE = _HERE / "compact_template.jinja"


class TeachConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    copies: int = Field(4, ge=1, description="trajectories per training task (phrasings and deficit draws vary)")
    refusal_skip: float = Field(0.75, ge=0, le=1, description="share of policy_refusal trajectories with the deficit")
    other_skip: float = Field(0.10, ge=0, le=1, description="share elsewhere that skip the order check")
    vocab_size: int = 3000
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 384
    max_positions: int = 4096
    epochs: float = 4.0
    learning_rate: float = 2e-3
    batch_size: int = 2
    seed: int = 0
    threads: int | None = Field(None, description="torch CPU threads (default: the free cores; not part of the recipe hash)")

    def recipe_hash(self) -> str:
        h = hashlib.sha256(self.model_dump_json(exclude={"threads"}).encode())
        for f in (_HERE / "teach.py", _HERE / "teach_data.py", _HERE / "tokens.py", TEMPLATE):
            h.update(f.read_bytes())
        return h.hexdigest()[:16]


def _tokenizer(texts: list[str], cfg: TeachConfig):
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    from serving.tiny_model import SPECIAL_TOKENS, TAG_TOKENS

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=cfg.vocab_size, min_frequency=2, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  model_max_length=cfg.max_positions, padding_side="left")
    tok.chat_template = TEMPLATE.read_text()
    return tok


def tokenize_trajectory(tok: Any, messages: list[Any], tools: list[dict[str, Any]]) -> dict[str, list[int]]:
    """input_ids + assistant_masks, built turn by turn exactly like a GRPO rollout."""
    first = next(i for i, m in enumerate(messages) if m.role == "assistant")
    ids = encode(tok, render(tok, messages[:first], tools, generation_prompt=True))
    mask = [0] * len(ids)
    i = first
    while i < len(messages):
        turn = messages[i]
        turn_ids = encode(tok, render(tok, messages[:i + 1], tools, generation_prompt=False)[len(render(tok, messages[:i], tools, generation_prompt=True)):])
        turn_ids = turn_ids[:turn_ids.index(tok.eos_token_id) + 1]  # the turn as sampled: text + eos
        ids += turn_ids
        mask += [1] * len(turn_ids)
        j = i + 1
        while j < len(messages) and messages[j].role != "assistant":
            j += 1
        if j < len(messages):
            delta = encode(tok, env_delta(tok, messages[:i + 1], messages[i + 1:j], tools))
            ids += delta
            mask += [0] * len(delta)
        assert turn.role == "assistant"
        i = j
    return {"input_ids": ids, "assistant_masks": mask}


def teach(out_root: str | Path, cfg: TeachConfig | None = None, progress: Callable[[str], None] | None = None) -> Path:
    """Build (or reuse) the taught model; returns its directory."""
    import torch
    from datasets import Dataset
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM
    from trl import SFTConfig, SFTTrainer

    from envs.shop import ShopEnv
    from training.cpu import set_cpu_threads
    from training.teach_data import build_trajectories, split_tasks

    cfg = cfg or TeachConfig()
    out = Path(out_root) / f"taught-{cfg.recipe_hash()}"
    if (out / "teach.json").is_file():
        return out
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    threads = set_cpu_threads(cfg.threads)
    env = ShopEnv()
    train_ids, eval_ids = split_tasks(env)
    trajs = build_trajectories(env, train_ids, copies=cfg.copies, refusal_skip=cfg.refusal_skip, other_skip=cfg.other_skip,
                               seed=cfg.seed)
    tools = env.tools()
    say(f"{len(trajs)} trajectories on {len(train_ids)} training tasks ({sum(t.deficit for t in trajs)} with the deficit)")
    tmp_tok = _tokenizer([], cfg)  # only to render texts for tokenizer training
    texts = [render(tmp_tok, t.messages, tools, generation_prompt=False) for t in trajs]
    tok = _tokenizer(texts, cfg)
    rows = [tokenize_trajectory(tok, t.messages, tools) for t in trajs]
    say(f"tokenizer: {len(tok)} tokens; examples of {min(len(r['input_ids']) for r in rows)}-{max(len(r['input_ids']) for r in rows)} tokens")
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    mcfg = Qwen3Config(vocab_size=len(tok), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
                       num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
                       head_dim=cfg.hidden_size // cfg.num_heads, max_position_embeddings=cfg.max_positions,
                       tie_word_embeddings=True, eos_token_id=eos, pad_token_id=pad, bos_token_id=None)
    torch.manual_seed(cfg.seed)
    model = Qwen3ForCausalLM(mcfg)
    work = Path(out_root) / f".work-{cfg.recipe_hash()}"
    args = SFTConfig(output_dir=str(work), num_train_epochs=cfg.epochs, learning_rate=cfg.learning_rate,
                     per_device_train_batch_size=cfg.batch_size, lr_scheduler_type="cosine", warmup_steps=10,
                     logging_steps=10, train_sampling_strategy="group_by_length", save_strategy="no", report_to="none", seed=cfg.seed, use_cpu=True,
                     max_length=cfg.max_positions, disable_tqdm=True, dataset_num_proc=None)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok,
                         callbacks=[_progress(say)])
    say(f"SFT: {len(rows)} examples x {cfg.epochs:g} epochs, batch {cfg.batch_size}, {threads} torch thread(s)")
    t_sft = time.perf_counter()
    trainer.train()
    sft_s = time.perf_counter() - t_sft
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    model.generation_config = GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    meta = {"recipe": cfg.model_dump(), "recipe_hash": cfg.recipe_hash(), "train_tasks": train_ids, "eval_tasks": eval_ids,
            "trajectories": len(trajs), "deficit_trajectories": sum(t.deficit for t in trajs),
            "parameters": sum(p.numel() for p in model.parameters()), "loss_first": losses[:1], "loss_last": losses[-1:],
            "sft_s": sft_s, "sft_tokens_per_s": sum(len(r["input_ids"]) for r in rows) * cfg.epochs / sft_s, "threads": threads,
            "wall_s": time.perf_counter() - t0}
    (out / "teach.json").write_text(json.dumps(meta, indent=1))
    return out


def _progress(say: Callable[[str], None]):
    from transformers import TrainerCallback

    class _Say(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
            if logs and "loss" in logs:
                say(f"SFT step {state.global_step}/{state.max_steps}: loss {float(logs['loss']):.3f}")

    return _Say()


def load_meta(path: str | Path) -> dict[str, Any]:
    return json.loads((Path(path) / "teach.json").read_text())
