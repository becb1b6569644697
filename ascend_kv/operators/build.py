"""Building a C++ library against the installed torch, once per torch and per source.

The operator library (``csrc/``) and the kernels' host build (``ascendc/``) are compiled here, on
first use, with the system C++ compiler (``$CXX``, else ``c++``) and torch's own headers and
libraries, the way ``torch.utils.cpp_extension`` would but without its ninja and CMake steps:
translation units in parallel, then one link. A library whose sources may share a unit (the
operator library) is compiled as one unit per CPU, each including its share of the sources:
torch's headers cost most of a file's compile time, so fewer units build faster
(docs/benchmarks.md, "Building the library"). Nothing about CUDA is asked, so any torch build
works, a CUDA wheel included.

The library is cached under ``$ASCEND_KV_CACHE_DIR`` (default ``~/.cache/ascend_kv``), named by
a hash of everything that changes it: each source file (path and bytes), the flags, the
compiler's version and torch's version and location. A build says what it does on stderr; a
concurrent build of the same library waits for the first (a file lock), and a partial file is
never seen (the library is renamed into place).
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch


class BuildError(RuntimeError):
    """Compiling or linking a library failed; the message holds the compiler's output."""


@dataclass(frozen=True)
class Library:
    """What to build.

    Attributes
    ----------
    name : str
        The library's name (``lib<name>-<hash>.so``), and what the build message calls it.
    what : str
        What it is, for the message printed while it builds.
    sources : tuple of Path
        The translation units.
    include_dirs : tuple of Path
        Searched first, in order, for the sources' own headers.
    hashed : tuple of Path
        Every other file the build reads (headers): part of the cache key.
    defines : tuple of str
        ``NAME`` or ``NAME=value`` preprocessor definitions.
    shared_units : bool
        Whether sources may share a translation unit (no two define the same internal name); else
        each source is its own.
    """

    name: str
    what: str
    sources: tuple[Path, ...]
    include_dirs: tuple[Path, ...]
    hashed: tuple[Path, ...] = ()
    defines: tuple[str, ...] = field(default=())
    shared_units: bool = False


def cache_dir() -> Path:
    """``$ASCEND_KV_CACHE_DIR``, else ``~/.cache/ascend_kv``."""
    configured = os.environ.get("ASCEND_KV_CACHE_DIR", "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "ascend_kv"


def compiler() -> str:
    """The C++ compiler: ``$CXX``, else ``c++`` from PATH."""
    return os.environ.get("CXX", "").strip() or "c++"


@functools.cache
def _compiler_version(cxx: str) -> str:
    try:
        result = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
    except OSError as error:
        raise BuildError(f"the C++ compiler {cxx!r} cannot be run ({error}): install g++ or clang++, or set CXX") from error
    return result.stdout.splitlines()[0] if result.stdout else cxx


def _torch_lib() -> Path:
    return Path(torch.__file__).resolve().parent / "lib"


def _torch_includes() -> list[Path]:
    """torch's C++ headers (what ``torch.utils.cpp_extension.include_paths()`` gives for CPU code; that
    module is not imported: on a CUDA build of torch without CUDA it warns at import)."""
    include = Path(torch.__file__).resolve().parent / "include"
    return [include, include / "torch" / "csrc" / "api" / "include"]


def _openmp_flags() -> tuple[list[str], list[str]]:
    """Compile and link flags for at::parallel_for: OpenMP against the runtime torch itself loaded
    (its bundled libgomp), so the library and torch share one thread pool; torch builds without
    OpenMP need none."""
    if not torch.backends.openmp.is_available():
        return [], []
    bundled = sorted(_torch_lib().glob("libgomp*.so*"))
    return ["-fopenmp"], [str(bundled[0])] if bundled else ["-fopenmp"]


def flags(library: Library) -> tuple[list[str], list[str]]:
    """``(compile flags, link flags)`` of ``library`` against this torch."""
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    standard = "c++20" if (major, minor) >= (2, 13) else "c++17"  # 2.13's headers use C++20 features
    openmp_compile, openmp_link = _openmp_flags()
    compile_flags = [
        f"-std={standard}", "-O2", "-fPIC", "-fvisibility-inlines-hidden",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        *openmp_compile,
        *(f"-D{define}" for define in library.defines),
        *(f"-I{directory}" for directory in library.include_dirs),
        *(f"-isystem{directory}" for directory in _torch_includes()),
    ]
    torch_lib = _torch_lib()
    link_flags = ["-shared", *openmp_link, f"-L{torch_lib}", "-lc10", "-ltorch_cpu", "-ltorch",
                  f"-Wl,-rpath,{torch_lib}", "-pthread"]
    return compile_flags, link_flags


def _key(library: Library, compile_flags: list[str], link_flags: list[str]) -> str:
    """The hash naming a build: the sources' names and bytes (not where they are: a wheel's copy of the
    repository's sources is the same library), the flags, the compiler, torch and Python."""
    digest = hashlib.sha256()
    flags = [flag for flag in compile_flags if not flag.startswith("-I")]
    for part in (torch.__version__, str(_torch_lib()), _compiler_version(compiler()), sys.version,
                 sysconfig.get_platform(), *flags, *link_flags):
        digest.update(part.encode() + b"\0")
    for path in sorted({*library.sources, *library.hashed}):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def _run(command: Sequence[str], what: str) -> None:
    result = subprocess.run(list(command), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-6000:]
        raise BuildError(f"{what} failed ({' '.join(command[:1])} ...):\n{tail}")


def build(library: Library) -> Path:
    """The library of the current sources and settings, built first if it is not cached."""
    compile_flags, link_flags = flags(library)
    target = cache_dir() / f"lib{library.name}-{_key(library, compile_flags, link_flags)}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent build of the same library finishes first
        if not target.is_file():
            _compile_and_link(library, compile_flags, link_flags, target)
    return target


def units(sources: Sequence[Path], count: int) -> list[list[Path]]:
    """``sources`` shared out over at most ``count`` translation units, each about as large (by bytes),
    each unit's files in their given order."""
    size = {source: source.stat().st_size for source in sources}
    shares: list[list[Path]] = [[] for _ in range(max(1, min(count, len(sources))))]
    totals = [0] * len(shares)
    for source in sorted(sources, key=lambda path: -size[path]):
        smallest = totals.index(min(totals))
        shares[smallest].append(source)
        totals[smallest] += size[source]
    order = {source: i for i, source in enumerate(sources)}
    return [sorted(share, key=order.__getitem__) for share in shares if share]


def _compile_and_link(library: Library, compile_flags: list[str], link_flags: list[str], target: Path) -> None:
    shares = (units(library.sources, os.cpu_count() or 1) if library.shared_units
              else [[source] for source in library.sources])
    print(f"ascend_kv: compiling {library.what} for torch {torch.__version__} ({len(library.sources)} files in "
          f"{len(shares)} translation unit{'s' if len(shares) > 1 else ''}) into {target.parent}; once for these "
          f"sources, later runs reuse it", file=sys.stderr, flush=True)
    started = time.monotonic()
    cxx = compiler()
    with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent) as work:
        objects = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(shares)) as pool:
            builds = []
            for i, share in enumerate(shares):
                unit = Path(work) / f"unit{i}.cpp"
                unit.write_text("".join(f'#include "{source}"\n' for source in share))
                objects.append(unit.with_suffix(".o"))
                what = f"compiling {', '.join(map(str, share))}"
                builds.append(pool.submit(_run, [cxx, *compile_flags, "-c", str(unit), "-o", str(objects[-1])], what))
            for done in builds:
                done.result()
        partial = Path(work) / target.name
        _run([cxx, *map(str, objects), *link_flags, "-o", str(partial)], f"linking {library.name}")
        shutil.move(str(partial), str(target))
    print(f"ascend_kv: compiled {library.what} in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
