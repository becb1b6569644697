"""The NPU backend: the compiled AscendC kernels, in their kernel library.

The library (``libascend_kv_npu.so``, built by ``scripts/build_npu.sh`` of a source checkout, or
by ``pip install`` from the source, on a host with CANN) exports its table of kernel entries
(``ascendc/host/kernel_library.h``); the operators (C++) run NPU calls through it. It is looked
for at ``$ASCEND_KV_NPU_LIB`` when that is set, else at ``ascend_kv/lib/libascend_kv_npu.so``
inside the installed package, and loaded once, lazily, when the policy first asks whether the
kernels can run. The kernels' host build exports the same table; pointed at by
``$ASCEND_KV_NPU_LIB``, it stands in for the kernel library on a device whose tensors hold host
memory (the fake NPU of the tests).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

import torch

NAME = "npu"
LIBRARY_ENV = "ASCEND_KV_NPU_LIB"
LIBRARY_FILE = "libascend_kv_npu.so"
DEFAULT_LIBRARY = Path(__file__).resolve().parent.parent / "lib" / LIBRARY_FILE
#: The symbol every kernel library exports: its table of kernel entries.
TABLE_SYMBOL = "ascend_kv_kernel_library"


@dataclass(frozen=True)
class LibraryStatus:
    """Whether the kernel library is loaded.

    Attributes
    ----------
    loaded : bool
        The library is loaded and its table registered with the operators.
    path : str
        Where it was looked for.
    reason : str or None
        Why it is not loaded (exception messages verbatim); None when loaded.
    """

    loaded: bool
    path: str
    reason: str | None


def library_path() -> Path:
    """``$ASCEND_KV_NPU_LIB`` when set, else :data:`DEFAULT_LIBRARY`."""
    configured = os.environ.get(LIBRARY_ENV, "").strip()
    return Path(configured) if configured else DEFAULT_LIBRARY


def _build_hint() -> str:
    """How to build the library: the build script in a source checkout, a source install for an installed package."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "build_npu.sh"
    if script.is_file():
        return f"build it on a host with CANN with {script}"
    return ("it is built when ascend_kv is installed from its source on a host with CANN "
            "(`source set_env.sh`, then `pip install --no-build-isolation .` in the source tree)")


def table_address(path: Path) -> int:
    """The address of the kernel table a loaded library at ``path`` exports (0: none)."""
    function = getattr(ctypes.CDLL(str(path)), TABLE_SYMBOL)
    function.restype = ctypes.c_void_p
    return int(function() or 0)


class _Library:
    """:func:`library`: the kernel library, loaded once; ``library.cache_clear()`` drops it (the
    operators forget their decisions) so the next call looks again."""

    def __init__(self) -> None:
        self._status: LibraryStatus | None = None

    def __call__(self) -> LibraryStatus:
        if self._status is None:
            self._status = _load(library_path())
        return self._status

    def cache_clear(self) -> None:
        if self._status is not None and self._status.loaded:
            torch.ops.ascend_kv._use_kernel_library(0, NAME)
        self._status = None
        torch.ops.ascend_kv._forget()


def _load(path: Path) -> LibraryStatus:
    """Load the kernel library at ``path`` and register its table; never raises (the reason is kept instead)."""
    if not path.is_file():
        where = f"${LIBRARY_ENV}" if os.environ.get(LIBRARY_ENV, "").strip() else "the package"
        return LibraryStatus(False, str(path), f"{path} does not exist (looked in {where}); {_build_hint()}, "
                                               f"or point {LIBRARY_ENV} at it")
    try:
        torch.ops.load_library(str(path))
        address = table_address(path)
        torch.ops.ascend_kv._use_kernel_library(address, NAME)
    except AttributeError:
        return LibraryStatus(False, str(path), f"{path} does not export {TABLE_SYMBOL}: it is not an ascend_kv "
                                               f"kernel library")
    except Exception as error:  # e.g. torch_npu's libraries missing: the loader's message says which
        return LibraryStatus(False, str(path), f"{type(error).__name__}: {error}")
    return LibraryStatus(True, str(path), None)


library = _Library()
"""The kernel library's status (loading it, and registering its table, the first time)."""
