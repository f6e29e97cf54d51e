"""store.files: a writer killed between its two renames leaves the previous copy, which the next sweep puts back."""

from __future__ import annotations

from pathlib import Path

from gapforge.store.files import check_dir, complete_dir, remove_partials


def _adapter(parent: Path, version: str) -> Path:
    final = parent / "step-000010"
    with complete_dir(final, "a held-out adapter") as tmp:
        (tmp / "adapter_config.json").write_text(f'{{"version": "{version}"}}')
    return final


def test_a_writer_killed_between_its_renames_gets_the_old_copy_back(tmp_path: Path) -> None:
    final = _adapter(tmp_path, "v1")
    final.rename(tmp_path / ".step-000010.old-4242")  # complete_dir's first rename: the old copy moved aside...
    (tmp_path / ".step-000010.partial-4242").mkdir()  # ...then the process died before the new one took its place
    remove_partials(tmp_path)
    assert check_dir(final, required=("adapter_config.json",)) is None
    assert '"v1"' in (final / "adapter_config.json").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000010"]


def test_an_old_copy_left_beside_a_whole_directory_is_removed(tmp_path: Path) -> None:
    old = _adapter(tmp_path, "v1")
    old.rename(tmp_path / ".step-000010.old-4242")
    _adapter(tmp_path, "v2")  # the new copy took its place; the writer died before removing the old one
    remove_partials(tmp_path)
    assert '"v2"' in (tmp_path / "step-000010" / "adapter_config.json").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000010"]
