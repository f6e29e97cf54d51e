"""Prompt templates are data: one file each, starting with a `---` header that
names the prompt and its version (recorded in the store beside what it produced).

    ---
    name: shop_user_simulator
    version: 1
    ---
    body with {placeholders}
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from gapforge.faults import GapforgeError


class PromptError(GapforgeError):
    """A prompts/ file is missing or has no valid name/version header (a packaging bug)."""


@dataclass(frozen=True)
class Prompt:
    name: str
    version: str
    body: str

    @property
    def id(self) -> str:
        return f"{self.name}@{self.version}"


def load_prompt(filename: str) -> Prompt:
    """The prompt in prompts/<filename>, header parsed off."""
    try:
        text = resources.files("gapforge.prompts").joinpath(filename).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PromptError(f"prompts/{filename} does not exist") from None
    head, sep, body = text.partition("\n---\n")
    if not text.startswith("---\n") or not sep:
        raise PromptError(f"prompts/{filename} needs a '---' header with name and version")
    fields = dict(line.split(":", 1) for line in head.removeprefix("---\n").splitlines() if ":" in line)
    name, version = fields.get("name", "").strip(), fields.get("version", "").strip()
    if not name or not version:
        raise PromptError(f"prompts/{filename}: header must set name and version")
    return Prompt(name, version, body)
