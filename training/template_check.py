"""The chat-format gate of a training job: the family's training template installed, then probed.

`prepare_tokenizer(tokenizer, tools)` installs the template serving.chat_format chose for the model's family (the one
sampling, training, serving and evaluation all render with) and runs training.tokens' `check_prefix_preserving` on it.
A refusal is re-raised as one TemplateDriftError that names the family, where the template came from and the fix.
"""

from __future__ import annotations

from typing import Any

from gapforge.serving.chat_format import ChatFormat, use_chat_format
from gapforge.training.tokens import TemplateDriftError, check_prefix_preserving

FIX = (
    "fix: save a prefix-preserving template as the model dir's chat_template.jinja (one that renders every turn the "
    "same wherever it stands: never drops past <think> blocks, never adds an empty one only to the last turn; "
    "serving/qwen3_training.jinja is Qwen3's), or use a family serving/chat_format.py knows"
)


def prepare_tokenizer(tokenizer: Any, tools: list[dict[str, Any]]) -> ChatFormat:
    """Install the family's training template on `tokenizer` and check it; TemplateDriftError names the fix."""
    fmt = use_chat_format(tokenizer)
    try:
        check_prefix_preserving(tokenizer, tools)
    except TemplateDriftError as e:
        what = f"{fmt.family} template ({fmt.source})"
        raise TemplateDriftError(f"{what}: {str(e).splitlines()[0]}; {FIX}") from None
    return fmt
