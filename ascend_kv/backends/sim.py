"""The ``sim`` backend: the AscendC kernels of ``ascendc/`` built for the host and run there.

The host build (the kernel sources against the host model of the AscendC API, the tiling and
the kernel entries, ``ascendc/host/kernel_entry.cpp``, with the launcher that runs the kernels
on the model, ``ascendc/sim/launch_host.cpp``) is compiled on first use by :mod:`ascend_kv.operators.build`
and cached, keyed by a hash of every source file and the build settings, so an edited source is
rebuilt (a build says so on stderr). It exports the same kernel table as the NPU build; loaded,
the table is registered with the operators, which run a call on it when the sim backend is
requested (CPU tensors). It is a test instrument: a kernel breaking an API rule (the host
model's message) or an access outside the tensors is a ``RuntimeError``. It also registers
instruments of its own: ``torch.ops.ascend_kv_host.launches()`` and the tiling of a call as text
(``.kv_cache_tiling``, ``.paged_cache_load_tiling``, ``.reshape_and_cache_tiling``,
``.block_copy_tiling``).

Settings, read by the library on every call: ``ASCEND_KV_SIM_CORES`` (vector cores, default
40) and ``ASCEND_KV_SIM_UB_BYTES`` (usable UB per core, default 192 KB - 256 B - 8 KB).
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import torch

from ..api.errors import BackendUnavailableError
from ..operators import build
from ..operators.library import source_root as sources
from . import npu

NAME = "sim"

_lock = threading.Lock()
_loaded: Path | None = None
_UNAVAILABLE = "backend 'sim' is not available: "


def _unavailable(why: str) -> BackendUnavailableError:
    return BackendUnavailableError(_UNAVAILABLE + why)


def source_root() -> Path:
    """The ``ascendc/`` sources: in the repository (editable install) or shipped in the wheel."""
    try:
        root = sources() / "ascendc"
    except ImportError as error:
        raise _unavailable(str(error)) from None
    if not (root / "sim" / "launch_host.cpp").is_file():
        raise _unavailable(f"the AscendC sources were not found at {root}")
    return root


def unavailable() -> str | None:
    """Why this process cannot run the host build (its sources or a C++ compiler missing), or None when it can."""
    if _loaded is not None:
        return None
    try:
        source_root()
    except BackendUnavailableError as error:
        return str(error).removeprefix(_UNAVAILABLE)
    if shutil.which(build.compiler()) is None:
        return (f"it builds the AscendC kernels for the host with a C++ compiler, and {build.compiler()!r} was not "
                "found (install g++ or clang++, or set CXX)")
    return None


def definition() -> build.Library:
    """The host build's sources and settings."""
    root = source_root()
    kernels = sorted((root / "kernels").glob("*.cpp"))
    sources = (*kernels, root / "host" / "tiling.cpp", root / "host" / "kernel_entry.cpp",
               root / "sim" / "launch_host.cpp")
    headers = sorted(p for pattern in ("*.h", "*/*.h", "sim/include/*.h") for p in root.glob(pattern))
    # The model's kernel_operator.h must win over any other header of that name: first.
    return build.Library("ascend_kv_host", "the AscendC kernels for the host (backend 'sim')", sources,
                         (root / "sim" / "include", root), tuple(headers),
                         ("ASCEND_KV_HOST_BUILD", "ASCEND_KV_KERNEL_LIBRARY=ascend_kv_host"))


def library_path() -> Path:
    """The host library of the current sources and settings, built first if it is not cached."""
    try:
        return build.build(definition())
    except build.BuildError as error:
        raise _unavailable(str(error)) from None


def load() -> None:
    """Load the host library into this process (once) and register its kernel table for the sim backend."""
    global _loaded
    with _lock:
        if _loaded is None:
            path = library_path()
            torch.ops.load_library(str(path))
            torch.ops.ascend_kv._use_kernel_library(npu.table_address(path), NAME)
            _loaded = path
