"""Build the sandbox image (one tag, config `sandbox.image`) by whichever method works.

Methods, all producing the same layout (python3 >= 3.11 on PATH, uid 65534,
/opt/gapforge mount point; server + SDK are mounted at run time, not baked):
- dockerfile:   `docker build` of sandbox/Dockerfile (needs a registry for python:3.11-slim)
- local-python: the host's own CPython (binary, stdlib without site-packages
                and tests, the shared libraries `ldd` names) tarred into a
                scratch image with `docker import` — offline, a few seconds
- debootstrap:  a minimal Debian rootfs (`--variant=minbase`, python3) from the
                Debian mirror in /etc/apt/sources.list, `docker import`ed — offline, ~30 s
`auto` tries dockerfile when the registry is reachable, else local-python, else debootstrap.
An image whose `gapforge.image` label matches the recipe hash is reused unless forced.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Callable, Literal

from gapforge.sandbox.errors import SandboxError

BuildMethod = Literal["auto", "dockerfile", "local-python", "debootstrap"]
RECIPE_VERSION = "1"
DOCKERFILE = Path(__file__).resolve().parent / "Dockerfile"
BASE_IMAGE = "python:3.11-slim"
_SKIP_STDLIB = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data"}
PASSWD = "root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"


def recipe_hash() -> str:
    return hashlib.sha256(RECIPE_VERSION.encode() + DOCKERFILE.read_bytes()).hexdigest()[:16]


def _changes(method: str) -> list[str]:
    return [
        "ENV PATH=/usr/local/bin:/usr/bin:/bin",
        "ENV LD_LIBRARY_PATH=/usr/local/lib",
        "USER 65534:65534",
        "WORKDIR /tmp",
        f"LABEL gapforge.image={recipe_hash()} gapforge.method={method}",
    ]


def image_is_current(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        labels = client.images.get(tag).labels or {}
    except docker.errors.ImageNotFound:
        return False
    return labels.get("gapforge.image") == recipe_hash()


def registry_reachable(host: str = "registry-1.docker.io", timeout: float = 3.0) -> bool:
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


# -- dockerfile ----------------------------------------------------------------
def build_dockerfile(client: Any, tag: str) -> None:
    import docker.errors

    try:
        client.images.build(
            path=str(DOCKERFILE.parent),
            dockerfile=DOCKERFILE.name,
            tag=tag,
            rm=True,
            labels={"gapforge.image": recipe_hash(), "gapforge.method": "dockerfile"},
        )
    except (docker.errors.BuildError, docker.errors.APIError) as e:
        raise SandboxError(
            f"docker build failed ({str(e).splitlines()[0][:200]}): try --method local-python or debootstrap"
        ) from None


# -- local-python --------------------------------------------------------------
def _ldd(path: Path) -> set[Path]:
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False).stdout
    libs = set()
    for line in out.splitlines():
        m = re.search(r"(/\S+) \(0x", line)
        if m:
            libs.add(Path(m.group(1)))
    return libs


def local_python_tar(dest: Path) -> None:
    """Write a rootfs tarball holding the host's CPython and what it links against."""
    exe = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    stdlib = Path(os.__file__).resolve().parent
    if sys.version_info < (3, 11):
        raise SandboxError("local-python needs Python >= 3.11 on the host: use --method debootstrap")
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    dynload = [p for p in (stdlib / "lib-dynload").glob("*.so") if "_tkinter" not in p.name]
    libs: set[Path] = set()
    for obj in [exe, *dynload]:
        libs |= _ldd(obj)
    with tarfile.open(dest, "w") as tar:

        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)

        def add_bytes(name: str, data: bytes, mode: int = 0o644) -> None:
            import io

            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        for d in ("tmp", "etc", "opt", "opt/gapforge", "usr", "usr/local", "usr/local/bin", "usr/local/lib"):
            add_dir(d, 0o1777 if d == "tmp" else 0o755)
        add_bytes("etc/passwd", PASSWD.encode())
        add_bytes("etc/group", GROUP.encode())
        tar.add(exe, f"usr/local/bin/{ver}")
        link = tarfile.TarInfo("usr/local/bin/python3")
        link.type, link.linkname = tarfile.SYMTYPE, ver
        tar.addfile(link)
        for lib in sorted(libs):
            target = f"usr/local/lib/{lib.name}" if "libpython" in lib.name else str(lib).lstrip("/")
            tar.add(lib.resolve(), target)
        skip = lambda ti: None if (set(Path(ti.name).parts) & _SKIP_STDLIB or "config-3" in ti.name) else ti  # noqa: E731
        tar.add(stdlib, f"usr/local/lib/{ver}", filter=skip)


def build_local_python(client: Any, tag: str) -> None:
    if shutil.which("ldd") is None:
        raise SandboxError("local-python needs `ldd` on the host: use --method debootstrap")
    repo, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    with tempfile.TemporaryDirectory(prefix="gapforge-img-") as tmp:
        tar = Path(tmp) / "rootfs.tar"
        local_python_tar(tar)
        client.api.import_image_from_file(str(tar), repository=repo, tag=version, changes=_changes("local-python"))


# -- debootstrap ---------------------------------------------------------------
def debian_mirror(sources_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror configured for apt (one-line or deb822 format)."""
    files = [sources_dir / "sources.list", *sorted((sources_dir / "sources.list.d").glob("*"))]
    for f in files:
        if not f.is_file():
            continue
        for m in re.finditer(
            r"(?:^deb\s+(?:\[[^\]]*\]\s+)?|^URIs:\s*)(\S+/debian)/?\s*$"
            r"|^deb\s+(?:\[[^\]]*\]\s+)?(\S+/debian)/?\s+bookworm",
            f.read_text(),
            re.M,
        ):
            return m.group(1) or m.group(2)
    return "http://deb.debian.org/debian"


def build_debootstrap(client: Any, tag: str) -> None:
    if shutil.which("debootstrap") is None or os.geteuid() != 0:
        raise SandboxError("debootstrap method needs the debootstrap tool and root: use --method local-python")
    repo, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    with tempfile.TemporaryDirectory(prefix="gapforge-img-") as tmp:
        root = Path(tmp) / "rootfs"
        cmd = [
            "debootstrap",
            "--variant=minbase",
            "--include=python3-minimal,libpython3.11-stdlib",
            "bookworm",
            str(root),
            debian_mirror(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SandboxError(
                f"debootstrap failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]} (is the Debian mirror reachable?)"
            )
        for junk in ("var/cache/apt/archives", "usr/share/doc", "usr/share/man", "usr/share/locale"):
            shutil.rmtree(root / junk, ignore_errors=True)
        (root / "opt/gapforge").mkdir(parents=True, exist_ok=True)
        tar = Path(tmp) / "rootfs.tar"
        with tarfile.open(tar, "w") as t:
            t.add(root, ".")
        client.api.import_image_from_file(str(tar), repository=repo, tag=version, changes=_changes("debootstrap"))


BUILDERS: dict[str, Callable[[Any, str], None]] = {
    "dockerfile": build_dockerfile,
    "local-python": build_local_python,
    "debootstrap": build_debootstrap,
}


def build_image(
    client: Any,
    tag: str,
    method: BuildMethod = "auto",
    force: bool = False,
    log: Callable[[str], None] = lambda s: None,
) -> str:
    """Make sure `tag` exists and is current; returns the method used ("cached" when reused)."""
    if method not in ("auto", *BUILDERS):
        raise SandboxError(f"unknown build method '{method}': use auto, {', '.join(BUILDERS)}")
    if not force and image_is_current(client, tag):
        return "cached"
    if method != "auto":
        BUILDERS[method](client, tag)
        return method
    order = ["local-python", "debootstrap"]
    if _has_base(client) or registry_reachable():
        order.insert(0, "dockerfile")
    else:
        log("registry unreachable: building offline")
    errors = []
    for name in order:
        try:
            BUILDERS[name](client, tag)
            return name
        except SandboxError as e:
            log(f"{name}: {e}")
            errors.append(f"{name}: {e}")
    raise SandboxError("no build method worked — " + "; ".join(errors))


def _has_base(client: Any) -> bool:
    import docker.errors

    try:
        client.images.get(BASE_IMAGE)
        return True
    except docker.errors.ImageNotFound:
        return False
