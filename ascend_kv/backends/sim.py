"""The ``sim`` backend: the AscendC kernels of ``ascendc/`` compiled for the host and run there.

The kernel sources are built with the system C++ compiler against the host model of the
AscendC API (``ascendc/sim/include/kernel_operator.h``) into a shared library, on first use,
and cached under ``$ASCEND_KV_CACHE_DIR`` (default ``~/.cache/ascend_kv``) by a hash of the
sources and the build command, so an edited source is rebuilt. It is a test instrument: never
chosen automatically, CPU tensors only (the dispatcher sees to that), and an error reported by the host model (a kernel
breaking an API rule) is a bug, raised as ``RuntimeError`` with the model's message.

Settings, read on every call:

- ``ASCEND_KV_SIM_CORES``: vector cores simulated (default 40, Ascend910B3).
- ``ASCEND_KV_SIM_UB_BYTES``: usable UB bytes per core (default 192 KB - 256 B - 8 KB).
- ``CXX``: the compiler (default ``g++``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ..calls import KvCacheCall, PagedLoadCall
from ..errors import BackendUnavailableError

NAME = "sim"

DEFAULT_CORES = 40
DEFAULT_UB_BYTES = 192 * 1024 - 256 - 8 * 1024
_FLAGS = ("-O2", "-std=c++17", "-shared", "-fPIC", "-pthread")
_MESSAGE_BYTES = 4096
# Return codes of the C entry points (ascendc/sim/launch_sim.cpp).
_OK, _TILING_ERROR, _MODEL_ERROR = 0, 1, 2

_u64 = ctypes.c_uint64
_ptr = ctypes.c_void_p
_lock = threading.Lock()
_library: ctypes.CDLL | None = None


# ----------------------------------------------------------------------------- settings


def _setting(name: str, default: int, minimum: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


def cores() -> int:
    """Vector cores the kernels run on: ``ASCEND_KV_SIM_CORES``, default 40."""
    return _setting("ASCEND_KV_SIM_CORES", DEFAULT_CORES, 1)


def ub_bytes() -> int:
    """Usable UB bytes per core: ``ASCEND_KV_SIM_UB_BYTES``, default 192 KB - 256 B - 8 KB."""
    return _setting("ASCEND_KV_SIM_UB_BYTES", DEFAULT_UB_BYTES, 1)


# ----------------------------------------------------------------------------- build


def source_root() -> Path:
    """The ``ascendc/`` sources: in the repository (editable install) or shipped in the wheel."""
    here = Path(__file__).resolve()
    for root in (here.parents[2] / "ascendc", here.parents[1] / "_ascendc"):
        if (root / "sim" / "launch_sim.cpp").is_file():
            return root
    raise BackendUnavailableError(
        f"backend 'sim' is not available: the AscendC sources were not found next to {here.parents[1]}"
    )


def _sources(root: Path) -> tuple[list[Path], list[Path]]:
    """``(translation units, every file the build reads)``, in a stable order."""
    units = sorted(root.glob("kernels/*.cpp")) + [root / "host" / "tiling.cpp", root / "sim" / "launch_sim.cpp"]
    headers = sorted(
        p for pattern in ("*.h", "kernels/*.h", "host/*.h", "sim/*.h", "sim/include/**/*.h") for p in root.glob(pattern)
    )
    return units, units + headers


def _compiler() -> str:
    name = os.environ.get("CXX", "").strip() or "g++"
    found = shutil.which(shlex.split(name)[0]) if name else None
    if found is None:
        raise BackendUnavailableError(
            f"backend 'sim' is not available: it compiles the AscendC kernels for the host with a C++17 "
            f"compiler, and {name!r} was not found (install g++ or set CXX)"
        )
    return name


def _cache_dir() -> Path:
    configured = os.environ.get("ASCEND_KV_CACHE_DIR", "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "ascend_kv"


def _build_plan() -> tuple[list[str], list[Path], Path]:
    """``(compile command without sources and output, translation units, cached library path)``."""
    root = source_root()
    units, inputs = _sources(root)
    command = [*shlex.split(_compiler()), *_FLAGS, f"-I{root / 'sim' / 'include'}", f"-I{root}"]
    digest = hashlib.sha256("\0".join(command).encode())
    for path in inputs:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return command, units, _cache_dir() / f"libascend_kv_sim-{digest.hexdigest()[:20]}.so"


def library_path() -> Path:
    """Where the build of the current sources and command is (or will be) cached."""
    return _build_plan()[2]


def build() -> Path:
    """Compile the host library unless a build of the same sources and command is cached."""
    command, units, target = _build_plan()
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build under a private name, then rename: a concurrent build or load never sees a partial file.
    fd, partial = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        result = subprocess.run(
            [*command, *map(str, units), "-o", partial], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise BackendUnavailableError(
                f"backend 'sim' is not available: compiling the AscendC kernels for the host failed "
                f"({' '.join(command)} ...):\n{result.stderr[-4000:]}"
            )
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def library() -> ctypes.CDLL:
    """The loaded host library (built on first use)."""
    global _library
    with _lock:
        if _library is None:
            lib = ctypes.CDLL(str(build()))
            lib.ascend_kv_sim_kv_cache.restype = ctypes.c_int
            lib.ascend_kv_sim_kv_cache.argtypes = [_ptr] * 5 + [_u64] * 8 + [ctypes.c_char_p, _u64]
            lib.ascend_kv_sim_paged_cache_load.restype = ctypes.c_int
            lib.ascend_kv_sim_paged_cache_load.argtypes = [_ptr] * 8 + [_u64] * 12 + [ctypes.c_char_p, _u64]
            for name in ("ascend_kv_sim_kv_cache_tiling", "ascend_kv_sim_paged_load_tiling"):
                getattr(lib, name).restype = ctypes.c_int
                getattr(lib, name).argtypes = [ctypes.POINTER(_u64), _u64, _u64, ctypes.POINTER(_u64)]
            _library = lib
        return _library


# ----------------------------------------------------------------------------- calls


def _int64(values: Sequence[int] | Sequence[Sequence[int]]) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.int64)


def _address(array: np.ndarray | torch.Tensor) -> int | None:
    return array.ctypes.data if isinstance(array, np.ndarray) else array.data_ptr()


def _row_bytes(rows: torch.Tensor) -> int:
    """Bytes of one row (``rows[i]``) of a ``[rows, ...]`` tensor."""
    return int(np.prod(rows.shape[1:])) * rows.element_size()


def _run(entry: str, *args: object) -> None:
    message = ctypes.create_string_buffer(_MESSAGE_BYTES)
    status = getattr(library(), entry)(*args, message, _MESSAGE_BYTES)
    if status == _TILING_ERROR:
        raise RuntimeError(
            f"sim: cannot tile the call for {cores()} cores and {ub_bytes()} UB bytes: {message.value.decode()}"
        )
    if status != _OK:
        raise RuntimeError(f"sim: the host model of the AscendC API stopped the kernel: {message.value.decode()}")


def kv_cache(call: KvCacheCall) -> None:
    """Run ``kv_cache_kernel`` on the host; writes ``call.past`` in place.

    Strided tensors run on contiguous copies (the result is copied back into ``call.past``).
    """
    past = call.past if call.past.is_contiguous() else call.past.contiguous()
    new_kv = call.new_kv.contiguous()
    layers, batch, max_seq_len, hidden = past.shape
    meta = [_int64(a) for a in (call.seq_len, call.read_start, call.write_start)]
    _run(
        "ascend_kv_sim_kv_cache",
        _address(new_kv), _address(past), *map(_address, meta),
        new_kv.shape[0], hidden * past.element_size(), layers, batch, max_seq_len, call.layer_id,
        cores(), ub_bytes(),
    )
    if past is not call.past:
        call.past.copy_(past)


def paged_cache_load(call: PagedLoadCall) -> None:
    """Run ``paged_cache_load_kernel`` on the host; writes ``call.key`` and ``call.value`` in place.

    Strided tensors run on contiguous copies (results are copied back into the outputs).
    """
    key_cache, value_cache = call.key_cache.contiguous(), call.value_cache.contiguous()
    key = call.key if call.key.is_contiguous() else call.key.contiguous()
    value = call.value if call.value.is_contiguous() else call.value.contiguous()
    batch, max_blocks = len(call.lens), call.table_columns
    table = _int64(call.block_table).reshape(batch, max_blocks)                 # also for an empty batch
    meta = [_int64(a) for a in (call.lens, call.out_start, call.first_column)]
    num_blocks = key_cache.shape[0]
    _run(
        "ascend_kv_sim_paged_cache_load",
        _address(key_cache), _address(value_cache), _address(table), *map(_address, meta),
        _address(key), _address(value),
        int(call.layout), call.num_tokens, batch, max_blocks, num_blocks, call.block_size,
        _row_bytes(key), _row_bytes(value),
        key.shape[0], value.shape[0], cores(), ub_bytes(),
    )
    for given, ran in ((call.key, key), (call.value, value)):
        if ran is not given:
            given.copy_(ran)
