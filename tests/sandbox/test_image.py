"""Offline image recipes: the local-Python rootfs and the apt mirror lookup."""

from __future__ import annotations

import tarfile
from pathlib import Path

from gapforge.sandbox.image import debian_mirror, local_python_tar


def test_local_python_rootfs_has_python_stdlib_and_user_but_no_site_packages(tmp_path: Path):
    tar = tmp_path / "rootfs.tar"
    local_python_tar(tar)
    with tarfile.open(tar) as t:
        names = set(t.getnames())
        passwd = t.extractfile("etc/passwd").read().decode()  # type: ignore[union-attr]
    assert "usr/local/bin/python3" in names
    assert any(n.endswith("/json/__init__.py") for n in names)
    assert not any("site-packages" in n for n in names)
    assert any(n.startswith("lib") and "libc.so" in n for n in names)
    assert "nobody:x:65534:65534" in passwd


def test_debian_mirror_reads_deb822_and_one_line_sources(tmp_path: Path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n"
    )
    assert debian_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://local.mirror/debian bookworm main\n")
    assert debian_mirror(tmp_path) == "http://local.mirror/debian"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert debian_mirror(empty) == "http://deb.debian.org/debian"
