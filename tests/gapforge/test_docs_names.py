"""The commands, options and config keys the docs name are real, as docs/config.md's staleness test keeps the keys'
reference real (test_config_docs.py).

Read: README.md, docs/*.md (not docs/experiments/, the lab notebook) and every folder's README.md. Checked, in
backticks (and in the lines of fenced code blocks):

- `gapforge COMMAND [SUBCOMMAND] --option ...`: the command exists and takes each option (`gapforge --help` tree);
  in a table row whose first cell names a `gapforge ...` command, the `--option` spans of its second cell (the
  options column) are that command's options;
- a dotted config key, `section.key` (also after `--set`, and as `key=value` / `key: value`): the key exists in
  the config models, and a value given to a key of a fixed set of values (`policy.kind: local`) is one of them.
  A dotted name that is a file, module or function of the repository (`evaluation.md`, `training.budget`,
  `store.get_episodes`) is not a key.

No model is loaded: the CLI's command tree and the config models only.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
import typer
from pydantic import BaseModel

from gapforge.cli import app
from gapforge.config import GapforgeConfig

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {"node_modules", "__pycache__", "gapforge.egg-info"}
FILE_EXTENSIONS = {
    "py",
    "md",
    "yaml",
    "yml",
    "json",
    "jsonl",
    "jinja",
    "toml",
    "txt",
    "png",
    "html",
    "csv",
    "sh",
    "cfg",
    "sqlite",
    "db",
    "safetensors",
    "log",
}

SPAN = re.compile(r"`([^`]+)`")
COMMAND = re.compile(r"(?:^|[\s/(=])gapforge\s+(\S.*)")
WORD = re.compile(r"[a-z][a-z0-9-]*")
OPTION = re.compile(r"--?[A-Za-z][\w-]*")
SHELL_END = {"|", "||", ";", "&&", "&", ">", ">>", "<", "#"}
KEY = re.compile(r"(?:^|--set[ =])([a-z_][a-z0-9_]*(?:\.[a-z0-9_*]+)+)(?P<rest>.*)$")
SET_KEY = re.compile(r"--set[ =]([a-z_][\w.*]*)=")
VALUE = re.compile(r"\s*[=:]\s*([A-Za-z_][\w-]*)\s*$")


def doc_files() -> list[Path]:
    """README.md, docs/*.md and every folder's README.md (hidden folders and docs/experiments/ left out)."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        here = Path(top)
        if here != ROOT and "README.md" in names and here.relative_to(ROOT).parts[:2] != ("docs", "experiments"):
            files.append(here / "README.md")
    return [f for f in files if f.is_file()]


def spans(text: str) -> Iterator[tuple[int, str, str | None]]:
    """(line number, span, the command its table row names when the span is in the table's `options` column, else
    None): inline code spans, and each line of a fenced block (its shell comment cut off)."""
    fenced, options_column = False, None
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            yield number, re.split(r"(?:^|\s)#", line, maxsplit=1)[0], None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)] if line.startswith("|") else []
        if not cells:
            options_column = None
        elif options_column is None:  # a table's header row
            options_column = cells.index("options") if "options" in cells else 0
        row_command = next((s for s in SPAN.findall(cells[1]) if COMMAND.search(s)), None) if len(cells) > 2 else None
        options = SPAN.findall(cells[options_column]) if row_command and options_column else []
        for span in SPAN.findall(line):
            yield number, span, row_command if span in options else None


def _tree() -> Any:
    return typer.main.get_command(app)


def _options(command: Any) -> set[str]:
    return {"--help"} | {
        o
        for p in command.params
        for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))
        if o.startswith("-")
    }


def resolve(text: str, root: Any) -> tuple[Any, str, list[str], str | None]:
    """The command a `gapforge ...` text names, its name, the words after it, or why it names none."""
    words = text.split()
    node, path = root, ["gapforge"]
    while hasattr(node, "commands") and words and WORD.fullmatch(words[0]):
        sub = node.commands.get(words[0])
        if sub is None:
            return None, "", [], f"no command `{' '.join([*path, words[0]])}`"
        node, path, words = sub, [*path, words[0]], words[1:]
    return node, " ".join(path), words, None


def option_problems(command: Any, words: list[str], name: str) -> list[str]:
    problems = []
    for word in words:
        if word in SHELL_END:
            break
        for part in word.split("/"):
            m = OPTION.match(part.split("=", 1)[0])
            if m and m.group(0) == part.split("=", 1)[0].rstrip(".,;:)") and m.group(0) not in _options(command):
                problems.append(f"`{name}` has no option {m.group(0)}")
    return problems


def command_problems(span: str, root: Any) -> list[str]:
    m = COMMAND.search(span)
    if m is None:
        return []
    command, name, words, why = resolve(m.group(1), root)
    return [why] if why else option_problems(command, words, name)


@functools.cache
def _package_source(package: str) -> str:
    folder = ROOT / package
    return "\n".join(f.read_text(encoding="utf-8") for f in sorted(folder.rglob("*.py"))) if folder.is_dir() else ""


def _is_code(parts: list[str]) -> bool:
    """A file or a name of the repository's code, not a key: `evaluation.md`, `training.budget` (training/budget.py),
    `store.get_episodes` (a function or method defined in store/)."""
    if parts[-1] in FILE_EXTENSIONS:
        return True
    if any(
        ROOT.joinpath(*parts[:i]).with_suffix(".py").is_file() or ROOT.joinpath(*parts[:i]).is_dir()
        for i in range(2, len(parts) + 1)
    ):
        return True
    return (
        re.search(rf"^\s*(?:async def|def|class) {re.escape(parts[1])}\b", _package_source(parts[0]), re.M) is not None
    )


def key_problem(key: str, rest: str = "") -> str | None:
    """Why `key` (with `rest`, e.g. `=value` or `: value`) is not a real config key or value; None when it is."""
    parts = key.split(".")
    node: Any = GapforgeConfig()
    field = None
    for i, part in enumerate(parts):
        if not isinstance(node, BaseModel):
            return f"`{'.'.join(parts[:i])}` is a value, not a section"
        matches = fnmatch.filter(type(node).model_fields, part)
        if not matches:
            return f"`{key}` is not a config key (docs/config.md lists them)"
        if "*" in part:
            return None
        field = type(node).model_fields[matches[0]]
        node = getattr(node, matches[0])
    value = VALUE.match(rest)
    if field is not None and value and typing.get_origin(field.annotation) is Literal:
        allowed = [str(a) for a in typing.get_args(field.annotation)]
        if value.group(1) not in allowed:
            return f"`{key}` takes {' | '.join(allowed)}, not {value.group(1)}"
    return None


def key_problems(span: str) -> list[str]:
    sections = {n for n in GapforgeConfig.model_fields if isinstance(getattr(GapforgeConfig(), n), BaseModel)}
    found = [(k, "") for k in SET_KEY.findall(span)]
    m = KEY.match(span.strip())
    if m and not m.group("rest").startswith((".", "(", "/", "[")):
        found.append((m.group(1), m.group("rest")))
    problems = []
    for key, rest in dict.fromkeys(found):
        parts = key.split(".")
        why = key_problem(key, rest) if parts[0] in sections else None
        if why and not _is_code(parts):
            problems.append(why)
    return problems


def problems_in(text: str, root: Any) -> list[tuple[int, str]]:
    """(line number, what is wrong) for each name `text` gets wrong."""
    out = []
    for number, span, row_command in spans(text):
        found = [*command_problems(span, root), *key_problems(span)]
        if row_command and span.startswith("-"):
            command, name, _, why = resolve(COMMAND.search(row_command).group(1), root)
            found += [] if why else option_problems(command, span.split()[:1], name)
        out += [(number, why) for why in found]
    return out


def test_every_command_option_and_config_key_the_docs_name_is_real() -> None:
    root = _tree()
    problems = [
        f"{f.relative_to(ROOT)}:{line}: {why}"
        for f in doc_files()
        for line, why in problems_in(f.read_text(encoding="utf-8"), root)
    ]
    assert not problems, "the docs name what does not exist:\n" + "\n".join(problems)


def test_the_docs_are_read_and_name_many() -> None:
    files = doc_files()
    names = {ROOT / "README.md", ROOT / "docs" / "cli.md", ROOT / "docs" / "config.md", ROOT / "agents" / "README.md"}
    assert names <= set(files) and not any("experiments" in f.parts for f in files)
    seen = [s for f in files for _, s, _ in spans(f.read_text(encoding="utf-8"))]
    assert sum(1 for s in seen if COMMAND.search(s)) > 30 and sum(1 for s in seen if KEY.match(s)) > 100


@pytest.mark.parametrize(
    ("span", "bad"),
    [
        ("gapforge run --resume RUN", False),
        ("gapforge rollouts collect --run RUN --allow-env-change", False),
        ("gapforge dev teach --eval/--no-eval", False),
        (".venv/bin/gapforge ui --port 0", False),
        ("gapforge run --nope", True),
        ("gapforge evaluate --passes 3", True),
        ("gapforge rollout collect", True),
        ("analysis.min_passes", False),
        ("analysis.required_passes", True),
        ("--set rollouts.env=tau2:airline", False),
        ("--set rollouts.envs=shop", True),
        ("policy.kind: endpoint", False),
        ("policy.kind: remote", True),
        ("routing.backend=gate", False),
        ("llm.endpoint.*", False),
        ("training.budget", False),  # a module (training/budget.py), not a key
        ("evaluation.md", False),
        ("gapforge/config.py", False),
    ],
)
def test_the_checker_tells_real_names_from_invented_ones(span: str, bad: bool) -> None:
    assert bool(command_problems(span, _tree()) + key_problems(span)) is bad


def test_a_table_rows_options_column_belongs_to_its_command() -> None:
    table = (
        "| command | options | what it does |\n| --- | --- | --- |\n"
        "| `gapforge runs` | `--kind K`, `--bogus` | lists runs (`--review` is `run`'s) |\n"
    )
    assert [(s, c) for _, s, c in spans(table) if c] == [("--kind K", "gapforge runs"), ("--bogus", "gapforge runs")]
    assert problems_in(table, _tree()) == [(3, "`gapforge runs` has no option --bogus")]
