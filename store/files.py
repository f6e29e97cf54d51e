"""Files a run keeps in its workspace, written so that nothing half-written is ever read back as good.

    with complete_dir(adapter_dir, "adapter") as tmp:
        model.save_pretrained(tmp)                  # lands at adapter_dir only once it is whole
    problem = check_dir(adapter_dir)                # None, or what is wrong with it

`complete_dir` writes into a hidden sibling directory, records every file's size and sha256 in `MANIFEST` (the
completion marker) and renames the directory into place. A full disk (ENOSPC) at any point removes the partial
directory and raises store.errors.DiskFull naming the path; the directory there before, if any, is left as it was.
`check_dir` reads a directory back: the manifest's sizes (and, with `deep=True`, its hashes) must match, every
`.safetensors` file's header must describe exactly the bytes on disk, every `.pt` / `.pth` file must be a whole zip
(torch's format) and every `.json` file must parse -- these also cover directories written before manifests existed,
and TRL's checkpoints. `write_text` writes one file the same way (temporary sibling, then rename). `remove_partials`
sweeps what a killed writer left (and puts back a previous copy it had moved aside).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gapforge.store.errors import DiskFull, is_disk_full

MANIFEST = "gapforge_files.json"
PARTIAL = ".partial-"  # `.NAME.partial-PID`: a directory being written (removed when its writer fails)
OLD = ".old-"  # `.NAME.old-PID`: the previous copy of NAME, moved aside while the new one is renamed in


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def complete_dir(final: Path, what: str) -> Iterator[Path]:
    """Yield a temporary directory to write `final`'s files into; on a clean exit it gets its manifest and
    replaces `final` (rename). DiskFull(final) when the disk fills; any error removes the partial directory."""
    final = Path(final)
    tmp = final.parent / f".{final.name}{PARTIAL}{os.getpid()}"
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        yield tmp
        files = {
            p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in sorted(tmp.iterdir()) if p.is_file()
        }
        with (tmp / MANIFEST).open("w") as f:
            json.dump({"files": files}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        if final.exists():
            old = final.parent / f".{final.name}{OLD}{os.getpid()}"
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(final)
        _fsync_dir(final.parent)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(e) and not isinstance(e, DiskFull):
            raise DiskFull(str(final), what) from None
        raise


def write_text(path: Path, text: str, what: str) -> None:
    """Write one file whole or not at all (a temporary sibling renamed over it); DiskFull naming it when the disk fills."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}{PARTIAL}{os.getpid()}")
    try:
        with tmp.open("w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if is_disk_full(e):
            raise DiskFull(str(path), what) from None
        raise


def remove_partials(parent: Path) -> None:
    """Remove what writers that died mid-write left under `parent` (partial directories and files). A previous
    copy a writer moved aside (`complete_dir`) goes back in place when it died before its new copy took that
    place, else it is removed."""
    for p in Path(parent).glob(f".*{PARTIAL}*"):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    for old in sorted(Path(parent).glob(f".*{OLD}*")):
        final = old.with_name(old.name[1:].rsplit(OLD, 1)[0])
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.rename(final)


def safetensors_problem(path: Path) -> str | None:
    """None when the file's header parses and its tensors end exactly at the end of the file, else what is wrong."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return f"{path.name} is {size} bytes: no safetensors header"
            n = int.from_bytes(head, "little")
            if n > size - 8:
                return f"{path.name} is cut inside its header ({size} bytes, header of {n})"
            header = json.loads(f.read(n))
    except (OSError, ValueError) as e:
        return f"{path.name}: unreadable header ({e})"
    ends = [
        t["data_offsets"][1]
        for k, t in header.items()
        if k != "__metadata__" and isinstance(t, dict) and "data_offsets" in t
    ]
    expected = 8 + n + max(ends, default=0)
    if expected != size:
        return f"{path.name} is {size} bytes, its header describes {expected} (truncated?)"
    return None


def check_dir(path: Path, *, required: tuple[str, ...] = (), deep: bool = False) -> str | None:
    """None when the directory reads back whole, else one line saying what is wrong (see the module docstring)."""
    path = Path(path)
    if not path.is_dir():
        return f"{path} does not exist"
    for name in required:
        if not (path / name).is_file():
            return f"{path} has no {name}"
    manifest = path / MANIFEST
    if manifest.is_file():
        try:
            files = json.loads(manifest.read_text())["files"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            return f"{path}/{MANIFEST} is unreadable ({e})"
        for name, rec in files.items():
            f = path / name
            if not f.is_file() or f.stat().st_size != rec["bytes"]:
                return f"{f} is missing or not the {rec['bytes']} bytes its manifest records"
            if deep and _sha256(f) != rec["sha256"]:
                return f"{f} does not match the sha256 its manifest records"
    for f in sorted(path.glob("*.safetensors")):
        if problem := safetensors_problem(f):
            return f"{path}: {problem}"
    # torch's zip format: a cut file has no central directory
    for f in sorted([*path.glob("*.pt"), *path.glob("*.pth")]):
        if not zipfile.is_zipfile(f):
            return f"{f} is not a whole torch file (truncated?)"
    for f in sorted(path.glob("*.json")):
        try:
            json.loads(f.read_text())
        except (OSError, ValueError) as e:
            return f"{f} is not whole JSON ({e})"
    return None


def sqlite_cut(path: Path) -> str | None:
    """Why a SQLite file is shorter than its own header says (cut by a full disk, a copy or a crash), else None.
    O(1): the header's page size x page count (offsets 16 and 28, valid when the change counter at 24 equals the
    version-valid-for number at 92, as every SQLite since 3.7.0 writes it) against the file's size."""
    try:
        with Path(path).open("rb") as f:
            head = f.read(100)
        size = Path(path).stat().st_size
    except OSError:
        return None
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00") or head[24:28] != head[92:96]:
        return None
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    expected = page * int.from_bytes(head[28:32], "big")
    return f"truncated: {size} bytes, its header says {expected}" if 0 < size < expected else None
