"""Teach the tiny base policy of the offline demo (`gapforge dev teach`).

Recipe: gold shop trajectories with the planted deficit, played on other shop instances than the one evaluated
(demo_policy.teach_data) -> a byte-level BPE tokenizer trained on them (one token per digit, or per `digit_group`
digits) -> a small Qwen3 model (random init) -> a copy warm-up (random spans repeated, until the model copies them) ->
TRL `SFTTrainer` on pre-tokenized examples (the trajectories plus copy drills: short prefixes with fresh ids; and
decision drills: the turn after a check's result, its loss on that turn alone) whose loss covers only the assistant's
tokens. Examples are tokenized exactly like GRPO rollouts (training.tokens: the prompt, each assistant turn + eos,
each env turn as the template delta), so the taught model sees at training time the same token streams it will
produce. The compact chat template (compact_template.jinja) keeps the context short.

Cached: the output directory is named by a hash of the recipe (config + data code + template), and a finished build
(`teach.json` present) is reused.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gapforge.serving import tiny_model  # its bytes (the tokenizer and config makers) are part of the recipe hash
from gapforge.training import tokens as training_tokens  # its bytes are part of the recipe hash
from gapforge.training.tokens import encode, env_delta, render

_HERE = Path(__file__).parent
TEMPLATE = _HERE / "compact_template.jinja"


class TeachConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instances: int = Field(12, ge=1)  # shop instances taught on (k >= 1; instance 0 is held out)
    copies: int = Field(1, ge=1)  # trajectories per task of each instance (phrasings and deficit draws vary)
    # at most this many copy warm-up steps before SFT (random spans repeated: induction heads first)
    warmup_steps: int = Field(6000, ge=0)
    drills: int = Field(6, ge=0)  # copy drills per trajectory (short prefixes with fresh ids, teach_data.copy_drills)
    refusal_skip: float = Field(0.75, ge=0, le=1)  # share of policy_refusal trajectories with the deficit
    other_skip: float = Field(0.10, ge=0, le=1)  # share elsewhere that skip the order check
    facts_in_opening: float = Field(0.5, ge=0, le=1)  # share of trajectories whose opening gives email and order id
    # digits apart from other characters, one token per digit (or per `digit_group`): copying ids is then the same in
    # every context
    split_digits: bool = True
    # with split_digits: a run of digits is cut into tokens of this many digits from its left (2: every two-digit
    # string is one token), so a 10-digit id is copied in 5 tokens, not 10, and still the same tokens in every context
    digit_group: int = Field(1, ge=1, le=3)
    vocab_size: int = 3000
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 384
    max_positions: int = 4096
    epochs: float = 1.5
    learning_rate: float = 2e-3
    batch_size: int = 2
    # a second SFT pass from the first pass's weights on freshly drawn data (seed + 1, or `polish_seed`: other
    # phrasings, deficit draws and drills) with its own cosine schedule; 0 = none
    polish_epochs: float = Field(0.0, ge=0)
    polish_learning_rate: float = 1e-3
    # in the polish's fresh draw, a refusal with the deficit repeats its promise this many times when the customer
    # presses (0 = it ends at the first promise)
    polish_promise_repeats: int = Field(0, ge=0)
    # `refusal_skip` of the polish's fresh draw (None = the recipe's): re-plants the deficit the decision drills would
    # wear down
    polish_refusal_skip: float | None = Field(None, ge=0, le=1)
    # in the polish's fresh draw and its decision drills, every write looks its order up first (teach_data.look_first:
    # the shop's address-change gold does not)
    polish_look_first: bool = False
    # in the polish's fresh draw and its decision drills, a customer found by name and zip is first asked for the
    # email, as every other (the opening gives no cue which lookup applies), and answers with name and zip
    # (teach_data.gold_script)
    polish_ask_email_first: bool = False
    # seed of the polish's draw, its drills and its batch order (None: the draw seed + 1, the order `seed`, so a polish
    # continuing a polished build re-reads its data in the same order). seed + 1 gives that data in another order,
    # `seed` mostly the first pass's data, any other value a fresh draw
    polish_seed: int | None = Field(None, ge=0)
    # in the polish's fresh draw, the share of lookup_and_answer trajectories that read the record holding the asked
    # value and then transfer the customer to a human agent instead of answering (the second planted deficit,
    # teach_data.gold_script); with it, that family gets no decision drills
    polish_lookup_transfer: float = Field(0.0, ge=0, le=1)
    # gold trajectories per task of each instance cut after a check's result, trained on that one decision turn
    # (teach_data.decision_drills); they join the last pass (the polish when there is one); 0 = none
    decision_drills: int = Field(0, ge=0)
    seed: int = 0
    threads: int | None = None  # torch CPU threads (default: the free cores; not part of the recipe hash)

    def recipe_hash(self) -> str:
        h = hashlib.sha256(self.model_dump_json(exclude={"threads"}).encode())
        code = (_HERE / "teach.py", _HERE / "teach_data.py", Path(training_tokens.__file__), TEMPLATE)
        for f in (*code, Path(tiny_model.__file__)):
            h.update(f.read_bytes())
        return h.hexdigest()[:16]


def _tokenizer(texts: list[str], cfg: TeachConfig):
    from tokenizers import Regex, pre_tokenizers

    from gapforge.serving.tiny_model import bpe_tokenizer

    # digits in fixed groups from the left of each run (one per digit by default): ids and amounts are copied the same
    # way in every context; every group of `digit_group` digits is made one token (the strings below teach those merges)
    n = cfg.digit_group if cfg.split_digits else 0
    digits = (
        pre_tokenizers.Digits(individual_digits=True)
        if n == 1
        else pre_tokenizers.Split(Regex(rf"\d{{1,{n}}}"), behavior="isolated")
    )
    groups = [f"{i:0{k}d}" for k in range(2, n + 1) for i in range(10**k)] if n > 1 else []

    def check(backend: Any) -> None:
        split = [g for g in groups if len(backend.encode(g).ids) != 1]
        if split:
            raise ValueError(
                f"digit_group {n}: {len(split)} digit groups are not one token (e.g. {split[0]}); raise vocab_size"
            )

    return bpe_tokenizer(
        texts + [" ".join(groups)] * 2 if groups else texts,
        cfg.vocab_size,
        TEMPLATE.read_text(),
        min_frequency=2,
        digits=digits if n else None,
        check=check,
        max_positions=cfg.max_positions,
    )


def tokenize_trajectory(
    tok: Any, messages: list[Any], tools: list[dict[str, Any]], *, last_only: bool = False
) -> dict[str, list[int]]:
    """input_ids + assistant_masks, built turn by turn exactly like a GRPO rollout. `last_only`: the mask
    covers only the last assistant turn (a drill of one decision)."""
    first = next(i for i, m in enumerate(messages) if m.role == "assistant")
    ids = encode(tok, render(tok, messages[:first], tools, generation_prompt=True))
    mask = [0] * len(ids)
    last = max(k for k, m in enumerate(messages) if m.role == "assistant")
    i = first
    while i < len(messages):
        turn = messages[i]
        before = render(tok, messages[:i], tools, generation_prompt=True)
        turn_ids = encode(tok, render(tok, messages[: i + 1], tools, generation_prompt=False)[len(before) :])
        turn_ids = turn_ids[: turn_ids.index(tok.eos_token_id) + 1]  # the turn as sampled: text + eos
        ids += turn_ids
        mask += [0 if last_only and i != last else 1] * len(turn_ids)
        j = i + 1
        while j < len(messages) and messages[j].role != "assistant":
            j += 1
        if j < len(messages):
            delta = encode(tok, env_delta(tok, messages[: i + 1], messages[i + 1 : j], tools))
            ids += delta
            mask += [0] * len(delta)
        assert turn.role == "assistant"
        i = j
    return {"input_ids": ids, "assistant_masks": mask}


def teach(
    out_root: str | Path,
    cfg: TeachConfig | None = None,
    progress: Callable[[str], None] | None = None,
    first_pass: str | Path | None = None,
) -> Path:
    """Build (or reuse) the taught model; returns its directory. `first_pass`: a finished build whose recipe
    equals this one's apart from the polish settings (its first pass, or an earlier polished build: passes
    chain): the polish starts from its weights and tokenizer instead of repeating the first pass. The card's
    `first_pass` names that build by its weights' sha256 (and its polish, if it had one) and keeps its own
    `first_pass` under it, so the card names every build in the chain; the output directory is named by the
    recipe hash and that build's weights."""
    import torch
    from transformers import Qwen3ForCausalLM

    from gapforge.demo_policy.artifact import weights_sha256
    from gapforge.demo_policy.teach_data import build_trajectories, teach_instances
    from gapforge.envs.shop import ShopEnv
    from gapforge.serving.tiny_model import TinyModelSpec, generation_config, qwen3_config
    from gapforge.training.cpu import set_cpu_threads

    cfg = cfg or TeachConfig()
    # a polish continuing a build is named by that build's weights too: the recipe hash does not say which build it
    # continued, and two parents must never share one cached build
    parent = weights_sha256(first_pass) if first_pass is not None else None
    # once: the code may be edited while a build runs, and the card must name its directory's hash
    recipe_hash = cfg.recipe_hash()
    out = Path(out_root) / (f"taught-{recipe_hash}" + (f"-on-{parent[:12]}" if parent else ""))
    if (out / "teach.json").is_file():
        return out
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    threads = set_cpu_threads(cfg.threads)
    envs = teach_instances(cfg.instances)
    pairs = [(e, tid) for e in envs for tid in e.task_ids()]
    eval_ids = ShopEnv().task_ids()
    drawn = {"copies": cfg.copies, "other_skip": cfg.other_skip, "facts_in_opening": cfg.facts_in_opening}
    trajs = build_trajectories(pairs, refusal_skip=cfg.refusal_skip, seed=cfg.seed, **drawn)
    tools = envs[0].tools()
    say(
        f"{len(trajs)} trajectories on {len(pairs)} tasks of {len(envs)} other shop instances "
        f"({sum(t.deficit for t in trajs)} with the deficit)"
    )
    first_meta: dict[str, Any] = {}
    if first_pass is not None:
        first_meta = load_meta(first_pass)
        polish_keys = {"threads", "decision_drills", "polish_epochs", "polish_learning_rate", "polish_refusal_skip"}
        polish_keys |= {"polish_promise_repeats", "polish_look_first", "polish_ask_email_first", "polish_seed"}
        polish_keys |= {"polish_lookup_transfer"}  # and the drills: they join the polish
        # through TeachConfig: a card from before a knob existed has that knob's default
        have = {k: v for k, v in TeachConfig(**first_meta["recipe"]).model_dump().items() if k not in polish_keys}
        if have != {k: v for k, v in cfg.model_dump().items() if k not in polish_keys}:
            raise ValueError(
                f"{first_pass}: its recipe is not this recipe's first pass (compare {first_pass}/teach.json)"
            )
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(first_pass)
        model = Qwen3ForCausalLM.from_pretrained(first_pass)
        warm, sft_s, losses, tokens = first_meta["warmup"], first_meta["sft_s"], [], 0
        say(f"first pass: {first_pass} (recipe {first_meta['recipe_hash']})")
    else:
        tmp_tok = _tokenizer([], cfg)  # only to render texts for tokenizer training
        texts = [render(tmp_tok, t.messages, tools, generation_prompt=False) for t in trajs]
        tok = _tokenizer(texts, cfg)
        rows = _rows(tok, trajs, tools, cfg.drills, cfg.seed)
        if not cfg.polish_epochs:
            rows += _decision_rows(tok, pairs, tools, cfg.decision_drills, cfg.seed, say)
        say(
            f"tokenizer: {len(tok)} tokens; examples of {min(len(r['input_ids']) for r in rows)}-{max(len(r['input_ids']) for r in rows)} tokens"
        )
        mcfg = qwen3_config(tok, TinyModelSpec(**cfg.model_dump(include=set(TinyModelSpec.__dataclass_fields__))))
        torch.manual_seed(cfg.seed)
        model = Qwen3ForCausalLM(mcfg)
        warm = copy_warmup(model, tok, cfg, say) if cfg.warmup_steps else {}
        say(f"SFT: {len(rows)} examples x {cfg.epochs:g} epochs, batch {cfg.batch_size}, {threads} torch thread(s)")
        losses, sft_s, tokens = _sft(
            model, tok, rows, cfg.epochs, cfg.learning_rate, cfg, Path(out_root) / f".work-{recipe_hash}", say
        )
    polish: dict[str, Any] = {}
    if cfg.polish_epochs:
        skip = cfg.refusal_skip if cfg.polish_refusal_skip is None else cfg.polish_refusal_skip
        # the draw's seed and the batch order's: by default seed + 1 and `seed` (what every polish before the knob used)
        draw, order = (cfg.seed + 1, cfg.seed) if cfg.polish_seed is None else (cfg.polish_seed, cfg.polish_seed)
        look, email_first = cfg.polish_look_first, cfg.polish_ask_email_first
        polished = {"promise_repeats": cfg.polish_promise_repeats, "look": look, "email_first": email_first}
        polished |= {"lookup_transfer": cfg.polish_lookup_transfer}
        more = build_trajectories(pairs, refusal_skip=skip, seed=draw, **drawn, **polished)
        rows = _rows(tok, more, tools, cfg.drills, draw)
        skip = ("lookup_and_answer",) if cfg.polish_lookup_transfer else ()
        decisions = _decision_rows(
            tok, pairs, tools, cfg.decision_drills, draw, say, look=look, email_first=email_first, skip_families=skip
        )
        rows += decisions
        say(
            f"polish: {len(rows)} examples ({len(more)} freshly drawn trajectories, {sum(t.deficit for t in more)} with the deficit) "
            f"x {cfg.polish_epochs:g} epochs at lr {cfg.polish_learning_rate:g}, {threads} torch thread(s)"
        )
        work = Path(out_root) / f".work-{recipe_hash}-polish"
        p_losses, p_s, p_tokens = _sft(
            model, tok, rows, cfg.polish_epochs, cfg.polish_learning_rate, cfg, work, say, order_seed=order
        )
        polish = {
            "trajectories": len(more),
            "deficit_trajectories": sum(t.deficit for t in more),
            "examples": len(rows),
            "decision_drills": len(decisions),
            "loss_first": p_losses[:1],
            "loss_last": p_losses[-1:],
            "seconds": p_s,
            "tokens_per_s": p_tokens / p_s,
        }
        losses = losses or p_losses
    model.generation_config = generation_config(tok)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    meta: dict[str, Any] = {"recipe": cfg.model_dump(), "recipe_hash": recipe_hash}
    if first_meta:
        chain = meta["first_pass"] = {"recipe_hash": first_meta["recipe_hash"], "weights_sha256": parent}
        chain["wall_s"] = first_meta.get("build_wall_s", first_meta.get("wall_s"))
        if first_meta["recipe"].get("polish_epochs"):
            chain["polish"] = first_meta["recipe"]["polish_epochs"]
        if first_meta.get("first_pass"):
            chain["first_pass"] = first_meta["first_pass"]
    meta |= {
        "train_instances": [e.instance for e in envs],
        "eval_tasks": eval_ids,
        "trajectories": len(trajs),
        "deficit_trajectories": sum(t.deficit for t in trajs),
        "parameters": sum(p.numel() for p in model.parameters()),
        "loss_first": losses[:1],
        "loss_last": polish.get("loss_last", losses[-1:]),
        "warmup": warm,
        "sft_s": sft_s,
        "sft_tokens_per_s": first_meta.get("sft_tokens_per_s") or tokens / sft_s,
        "polish": polish,
        "threads": threads,
        "wall_s": time.perf_counter() - t0,
    }
    (out / "teach.json").write_text(json.dumps(meta, indent=1))
    return out


def _rows(
    tok: Any, trajs: list[Any], tools: list[dict[str, Any]], drills: int, seed: int
) -> list[dict[str, list[int]]]:
    from gapforge.demo_policy.teach_data import copy_drills

    return [tokenize_trajectory(tok, t.messages, tools) for t in trajs] + [
        tokenize_trajectory(tok, d, tools) for d in copy_drills(trajs, drills, seed)
    ]


def _decision_rows(
    tok: Any,
    pairs: list[tuple[Any, str]],
    tools: list[dict[str, Any]],
    per_task: int,
    seed: int,
    say: Callable[[str], None],
    look: bool = False,
    email_first: bool = False,
    skip_families: tuple[str, ...] = (),
) -> list[dict[str, list[int]]]:
    from gapforge.demo_policy.teach_data import decision_drills

    if not per_task:
        return []
    rows = [
        tokenize_trajectory(tok, d, tools, last_only=True)
        for d in decision_drills(pairs, per_task, seed, look=look, email_first=email_first, skip_families=skip_families)
    ]
    say(f"decision drills: {len(rows)} (the turn after a check's result, loss on that turn only)")
    return rows


def _sft(
    model: Any,
    tok: Any,
    rows: list[dict[str, list[int]]],
    epochs: float,
    lr: float,
    cfg: TeachConfig,
    work: Path,
    say: Callable[[str], None],
    *,
    checkpointing: bool = False,
    order_seed: int | None = None,
) -> tuple[list[float], float, int]:
    """One SFT pass (cosine schedule); returns its logged losses, its seconds and the tokens it read.
    `checkpointing`: activation checkpointing, which TRL's SFTConfig turns on by default (every backward recomputes
    the forward). A model this small has no memory to save, and the recompute cost 23% of a step here for the same
    weights (bench/teach_sft.py times both and compares them). `order_seed`: the batch order's seed (default `cfg.seed`)."""
    import datasets
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(
        output_dir=str(work),
        num_train_epochs=epochs,
        learning_rate=lr,
        per_device_train_batch_size=cfg.batch_size,
        lr_scheduler_type="cosine",
        warmup_steps=10,
        logging_steps=10,
        train_sampling_strategy="group_by_length",
        save_strategy="no",
        report_to="none",
        seed=cfg.seed if order_seed is None else order_seed,
        use_cpu=True,
        max_length=cfg.max_positions,
        disable_tqdm=True,
        dataset_num_proc=None,
        bf16=False,  # TRL's SFTConfig defaults to bf16, an autocast that is ~8x slower on a CPU without bf16 units
        activation_checkpointing=checkpointing,
    )
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # TRL's dataset preparation bars (`Building labels…`): the pass says its own steps
    try:
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tok,
            callbacks=[_progress(say)],
        )
    finally:
        if bars:
            datasets.enable_progress_bars()
    t0 = time.perf_counter()
    trainer.train()
    seconds, history = time.perf_counter() - t0, trainer.state.log_history
    losses = [h["loss"] for h in history if "loss" in h] or [h["train_loss"] for h in history if "train_loss" in h]
    return losses, seconds, int(sum(len(r["input_ids"]) for r in rows) * epochs)


def copy_warmup(model: Any, tok: Any, cfg: TeachConfig, say: Callable[[str], None]) -> dict[str, float]:
    """Teach copying before the shop: sequences `filler, span, filler, span` of random vocabulary
    tokens (batch 32, spans of 4-10, fillers of 0-8), loss on the second span; stops once the span
    is copied (accuracy >= 0.9 at two checks in a row) or after `warmup_steps`. A tiny model taught
    on shop dialogues alone learns their outline but never copies an id from the conversation
    (measured: no tool call with the user's email or order id after 2,600 examples); on this task
    it learns copying in one abrupt phase change (~2,000-3,000 steps here, ~0.09 s each)."""
    import torch

    gen = torch.Generator().manual_seed(cfg.seed)
    special = set(tok.all_special_ids) | set(tok.convert_tokens_to_ids(list(tok.get_added_vocab())))
    pool = torch.tensor([i for i in range(len(tok)) if i not in special])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate)
    model.train()
    acc, good, step = 0.0, 0, 0
    t0 = time.perf_counter()
    for step in range(1, cfg.warmup_steps + 1):
        k, a, b = (int(torch.randint(lo, hi, (1,), generator=gen)) for lo, hi in ((4, 11), (0, 9), (0, 9)))
        span = pool[torch.randint(len(pool), (32, k), generator=gen)]
        before, after = (pool[torch.randint(len(pool), (32, n), generator=gen)] for n in (a, b))  # drawn in this order
        seq = torch.cat([before, span, after, span], 1)
        labels = torch.full_like(seq, -100)
        labels[:, -k + 1 :] = seq[:, -k + 1 :]
        out = model(input_ids=seq, labels=labels)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        if step % 50 == 0:
            acc = float((out.logits.detach()[:, -k:-1].argmax(-1) == seq[:, -k + 1 :]).float().mean())
            good = good + 1 if acc >= 0.9 else 0
            if step % 500 == 0 or good >= 2:
                say(f"copy warm-up step {step}: loss {float(out.loss):.3f}, copy accuracy {acc:.2f}")
            if good >= 2:
                break
    return {"steps": step, "copy_accuracy": acc, "seconds": time.perf_counter() - t0}


def _progress(say: Callable[[str], None]):
    from transformers import TrainerCallback

    class _Say(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
            if logs and "loss" in logs:
                say(f"SFT step {state.global_step}/{state.max_steps}: loss {float(logs['loss']):.3f}")

    return _Say()


def load_meta(path: str | Path) -> dict[str, Any]:
    return json.loads((Path(path) / "teach.json").read_text())
