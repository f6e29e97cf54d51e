"""Tiny tokenizers carrying real chat templates of the families gapforge trains (TRL's copies, read from the
installed trl package), with each family's control tokens: Qwen's <|im_start|> / <|im_end|> and Llama 3's
header / <|eot_id|> tokens. The <think> / <tool_call> / <tool_response> tags are added tokens in both."""

from __future__ import annotations

from gapforge.serving.chat_format import stock_template
from gapforge.serving.tiny_model import build_tokenizer

LLAMA3_SPECIAL = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
)


def family_tokenizer(stem: str):
    """A tokenizer whose chat template is TRL's `<stem>.jinja` (e.g. "qwen3", "qwen2_5", "llama3_1")."""
    template = stock_template(stem)
    if stem.startswith("llama"):
        return build_tokenizer(
            special_tokens=LLAMA3_SPECIAL,
            eos_token="<|eot_id|>",
            pad_token="<|end_of_text|>",
            bos_token="<|begin_of_text|>",
            template=template,
        )
    return build_tokenizer(template=template)
