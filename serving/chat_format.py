"""The one chat format a policy is sampled, trained, served and evaluated with (docs/training.md, "Templates").

Exact-token GRPO (training.tokens) appends each env turn as the chat template's *delta*, so the template
must be prefix-preserving: rendering k messages is a prefix of rendering k+1. Some stock templates rewrite
history; Qwen3's drops the reasoning of assistant turns before the last user message and adds an empty
think block only to a final assistant turn. `chat_format(tokenizer)` recognises a family's stock template
(exact text of the copies TRL ships in `trl/chat_templates/`, read from the installed package at run time)
and returns the template to use instead, the family's tool-call format and what the swap throws away;
`use_chat_format(tokenizer)` installs it on the tokenizer. Every loader of a policy tokenizer calls it
(`load_tokenizer`), so training.tokens.render, serving.local.render_prompt and vLLM's `--chat-template`
(`gapforge dev chat-template`) all render the same text.

| family | stock template (TRL's copy) | template used | tool calls |
| --- | --- | --- | --- |
| Qwen3 (hybrid thinking: Qwen3-8B, Qwen3-30B-A3B, ...) | qwen3.jinja | serving/qwen3_training.jinja | hermes |
| Qwen3 Instruct-2507 | qwen3_instruct_2507.jinja | stock | hermes |
| Qwen2.5 | qwen2_5.jinja | stock | hermes |
| Llama 3.1 / 3.2 | llama3_1.jinja, llama3_2.jinja | stock | llama3_json |

Refused with the reason: Llama 3.0 (its template drops tool calls) and Qwen3.5 / 3.6 / 3.8 (their
`<function=...>` tool-call format has no parser here). Any other template is kept as it is; the
prefix-preserving probe (training.template_check) then decides.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gapforge.serving.errors import ServingError

ToolFormat = Literal["hermes", "llama3_json"]
QWEN3_TRAINING = Path(__file__).with_name("qwen3_training.jinja")
QWEN3_DROPPED = (
    "nothing of the conversation: past turns keep their reasoning, which the stock template drops before the "
    "last user message (longer contexts; Qwen3 was post-trained without it), and a final assistant turn "
    "without reasoning gets no empty think block"
)


@dataclass(frozen=True)
class ChatFormat:
    family: str  # "qwen3", "qwen2.5", "llama3.1", ... or "unknown"
    template: str  # the text every render uses
    source: str  # where the text comes from: "stock", "gapforge:qwen3_training.jinja"
    tool_format: ToolFormat
    dropped: str = ""  # what the template throws away versus the model's stock one ("" = it is the stock one)


# TRL's file name -> (family, what to do); "ours" = serving/qwen3_training.jinja replaces it
_KNOWN: dict[str, tuple[str, str]] = {
    "qwen3": ("qwen3", "ours"),
    "qwen3_training": ("qwen3", "stock"),  # TRL's own prefix-preserving variant (always an empty think block)
    "qwen3_instruct_2507": ("qwen3-instruct-2507", "stock"),
    "qwen2_5": ("qwen2.5", "stock"),
    "llama3_1": ("llama3.1", "stock"),
    "llama3_2": ("llama3.2", "stock"),
}
_NO_PARSER = "'s <function=...> tool-call format has no parser in gapforge yet: use a Qwen3 or Qwen2.5 model"
_REFUSED: dict[str, str] = {
    "llama3": "Llama 3.0's chat template drops assistant tool calls: use a Llama 3.1 or 3.2 model",
    **{stem: name + _NO_PARSER for stem, name in (("qwen3_5_think", "Qwen3.5"), ("qwen3_5_nothink", "Qwen3.5"))},
    **{stem: name + _NO_PARSER for stem, name in (("qwen3_6", "Qwen3.6"), ("qwen3_8", "Qwen3.8"))},
}


def _trl_root() -> Any:
    """The installed trl package's chat_templates folder, or None without trl."""
    from importlib import resources

    try:
        return resources.files("trl.chat_templates")
    except ModuleNotFoundError:
        return None


@functools.cache
def trl_templates() -> dict[str, str]:
    """{file stem: text} of the original (non-training) chat templates TRL ships, read from the installed package."""
    root = _trl_root()
    stems = [f.name.removesuffix(".jinja") for f in root.iterdir() if f.name.endswith(".jinja")] if root else []
    return {s: (root / f"{s}.jinja").read_text(encoding="utf-8") for s in stems if s in _KNOWN or s in _REFUSED}


def stock_template(name: str) -> str:
    """The text of one of the chat templates TRL ships (file stem, e.g. "qwen3"), read from the installed trl package."""
    root = _trl_root()
    if root is None:
        raise ServingError("the trl package is not installed: its chat templates are read from it")
    names = sorted(f.name.removesuffix(".jinja") for f in root.iterdir() if f.name.endswith(".jinja"))
    if name not in names:
        raise ServingError(f"no chat template {name!r} in trl/chat_templates: one of {', '.join(names)}")
    return (root / f"{name}.jinja").read_text(encoding="utf-8")


def qwen3_training_template() -> str:
    return QWEN3_TRAINING.read_text(encoding="utf-8")


def tool_format_of(template: str) -> ToolFormat:
    """The tool-call format a template teaches: Llama 3.1's bare JSON with "parameters", else Hermes <tool_call> tags."""
    return "llama3_json" if "<|start_header_id|>" in template and '"parameters"' in template else "hermes"


def _text(tokenizer: Any) -> str:
    template = tokenizer.chat_template
    if isinstance(template, dict):  # named variants: the default one renders conversations
        template = template.get("default")
    if not template:
        raise ServingError(
            f"the tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template: add chat_template.jinja to the model dir"
        )
    return template


def identify(template: str) -> str | None:
    """The TRL file stem whose text equals `template` (trailing whitespace ignored), else None."""
    if template.strip() == qwen3_training_template().strip():
        return "gapforge:qwen3_training"
    return next((name for name, text in trl_templates().items() if text.strip() == template.strip()), None)


def chat_format(tokenizer: Any) -> ChatFormat:
    """The format to sample, train, serve and evaluate this tokenizer's model with (see the module table)."""
    template = _text(tokenizer)
    name = identify(template)
    if name in _REFUSED:
        raise ServingError(f"{getattr(tokenizer, 'name_or_path', 'this model')}: {_REFUSED[name]}")
    if name == "gapforge:qwen3_training":
        return ChatFormat("qwen3", template, "gapforge:qwen3_training.jinja", "hermes", QWEN3_DROPPED)
    if name is None:
        return ChatFormat("unknown", template, "stock", tool_format_of(template))
    family, action = _KNOWN[name]
    if action == "ours":
        return ChatFormat(family, qwen3_training_template(), "gapforge:qwen3_training.jinja", "hermes", QWEN3_DROPPED)
    return ChatFormat(family, template, "stock", tool_format_of(template))


def use_chat_format(tokenizer: Any) -> ChatFormat:
    """Install the chosen template on the tokenizer (in place) and return the choice."""
    fmt = chat_format(tokenizer)
    tokenizer.chat_template = fmt.template
    return fmt


def load_tokenizer(path: str | Path) -> Any:
    """A policy tokenizer from a local model dir with its chat format installed (the one loader of policy tokenizers)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    use_chat_format(tokenizer)
    return tokenizer
