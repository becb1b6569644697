"""The ``sim`` backend: the AscendC kernels of ``ascendc/`` built for the host and run there.

The host build (CMake target ``ascend_kv_host``: the kernel sources against the host model of
the AscendC API, the tiling and the shared op binding) is built on first use with CMake and
cached under ``$ASCEND_KV_CACHE_DIR`` (default ``~/.cache/ascend_kv``), keyed by a hash of every
source file and the build settings, so an edited source is rebuilt (a build says so on stderr). The library registers
``torch.ops.ascend_kv_host.kv_cache``, ``.paged_cache_load`` and ``.reshape_and_cache`` for CPU and
PrivateUse1; this
module loads it and calls them. It is a test instrument: a kernel breaking an API rule (the
host model's message) or an access outside the tensors is a ``RuntimeError``.

Settings, read by the library on every call: ``ASCEND_KV_SIM_CORES`` (vector cores, default
40) and ``ASCEND_KV_SIM_UB_BYTES`` (usable UB per core, default 192 KB - 256 B - 8 KB). The
build uses ``cmake`` from PATH (or next to the Python executable) and CMake's usual ``CXX``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import torch

from ..api.errors import BackendUnavailableError
from ..rules.forms import BlockCopyArgs, KvCacheArgs, PagedLoadArgs, ReshapeAndCacheArgs
from . import kernel_domain

NAME = "sim"

_TARGET = "ascend_kv_host"
_BUILD_JOBS = 2
_lock = threading.Lock()
_loaded: Path | None = None


# ----------------------------------------------------------------------------- build

_UNAVAILABLE = "backend 'sim' is not available: "


def _unavailable(why: str) -> BackendUnavailableError:
    return BackendUnavailableError(_UNAVAILABLE + why)


def unavailable() -> str | None:
    """Why this process cannot run the host build (its sources or CMake missing), or None when it can."""
    if _loaded is not None:
        return None
    try:
        source_root()
        _cmake()
    except BackendUnavailableError as error:
        return str(error).removeprefix(_UNAVAILABLE)
    return None


def source_root() -> Path:
    """The ``ascendc/`` sources: in the repository (editable install) or shipped in the wheel."""
    here = Path(__file__).resolve()
    for root in (here.parents[2] / "ascendc", here.parents[1] / "_ascendc"):
        if (root / "CMakeLists.txt").is_file() and (root / "cmake" / "host.cmake").is_file():
            return root
    raise _unavailable(f"the AscendC sources were not found next to {here.parents[1]}")


def _cmake() -> str:
    found = shutil.which("cmake") or shutil.which("cmake", path=str(Path(sys.executable).parent))
    if found is None:
        raise _unavailable("it builds the AscendC kernels for the host with CMake, and 'cmake' was not found "
                           "(install it, e.g. `pip install cmake`)")
    return found


def _cache_dir() -> Path:
    configured = os.environ.get("ASCEND_KV_CACHE_DIR", "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "ascend_kv"


def _settings() -> list[str]:
    """Everything besides the sources that changes the library: CMake, compiler, torch."""
    return [_cmake(), os.environ.get("CXX", ""), torch.__version__, torch.utils.cmake_prefix_path, sys.version]


def _sources(root: Path) -> list[Path]:
    """Every file the build reads, in a stable order (the model's own test driver excluded)."""
    patterns = ("CMakeLists.txt", "**/*.cmake", "**/*.h", "**/*.cpp")
    return sorted({p for pattern in patterns for p in root.glob(pattern) if "tests" not in p.relative_to(root).parts})


def _cached_path() -> Path:
    root = source_root()
    digest = hashlib.sha256("\0".join(_settings()).encode())
    for path in _sources(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return _cache_dir() / f"libascend_kv_host-{digest.hexdigest()[:20]}.so"


def _run(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-4000:]
        raise _unavailable(f"{what} failed ({' '.join(command)}):\n{tail}")


def _build(target: Path) -> None:
    """Configure and build the host target in a private folder, then rename the library into
    place: a concurrent build or load never sees a partial file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"ascend_kv: building the AscendC kernels for the host (backend 'sim') into {target.parent}; "
          "once for these sources, later runs reuse it", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent) as work:
        build = Path(work) / "build"
        cmake = _cmake()
        _run([cmake, "-S", str(source_root()), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
              f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}"], "configuring the host build")
        _run([cmake, "--build", str(build), "--target", _TARGET, "-j", str(_BUILD_JOBS)],
             "compiling the AscendC kernels for the host")
        (built,) = build.rglob(f"lib{_TARGET}.so")
        partial = Path(work) / target.name
        shutil.copy2(built, partial)
        os.replace(partial, target)


def library_path() -> Path:
    """The host library of the current sources and settings, built first if it is not cached."""
    target = _cached_path()
    if not target.is_file():
        _build(target)
    return target


def load() -> None:
    """Load the host library into this process (once; it registers ``torch.ops.ascend_kv_host``)."""
    global _loaded
    with _lock:
        if _loaded is None:
            path = library_path()
            torch.ops.load_library(str(path))
            _loaded = path


# ----------------------------------------------------------------------------- calls


def _in_domain(args: KvCacheArgs | PagedLoadArgs | ReshapeAndCacheArgs) -> dict[str, torch.Tensor]:
    """Each data tensor itself when the kernels take it in place, else a contiguous copy."""
    return {name: tensor if kernel_domain.dense_from(tensor, first_dim) else tensor.contiguous()
            for name, (tensor, first_dim, _) in args.rows().items()}


def _write_back(given: torch.Tensor | None, ran: torch.Tensor | None) -> None:
    """Copy what the kernel wrote into the caller's tensor when it ran on a copy (absent: nothing)."""
    if given is not None and ran is not None and ran is not given:
        given.copy_(ran)


def kv_cache(args: KvCacheArgs) -> None:
    """Run ``kv_cache_kernel`` on the host; writes ``args.past`` in place.

    CPU tensors, or tensors of a PrivateUse1 device that hold host memory; index tensors are moved
    to the data's device. Index values are not checked: out-of-range tokens are skipped. Tensors
    outside the kernels' domain (:func:`kernel_domain.outside_reason`) run on contiguous copies.
    """
    load()
    t = _in_domain(args)
    device = args.past.device
    layer = args.layer_id
    layer_tensor = kernel_domain.index_operand(layer, device) if isinstance(layer, torch.Tensor) else None
    layer_id = 0 if isinstance(layer, torch.Tensor) else int(layer)
    torch.ops.ascend_kv_host.kv_cache(t["new_kv"], t["past"], kernel_domain.index_operand(args.token_offset, device),
                                      kernel_domain.index_operand(args.seq_len, device), layer_tensor, layer_id)
    _write_back(args.past, t["past"])


def paged_cache_load(args: PagedLoadArgs) -> None:
    """Run ``paged_cache_load_kernel`` on the host; writes ``args.key`` and ``args.value`` in place.

    Index values are not checked: out-of-range blocks, columns and rows are skipped. Tensors
    outside the kernels' domain run on contiguous copies (outputs copied back).
    """
    load()
    t = _in_domain(args)
    device = args.key_cache.device
    seq_starts = kernel_domain.index_operand(args.seq_starts, device) if args.seq_starts is not None else None
    torch.ops.ascend_kv_host.paged_cache_load(t["key_cache"], t["value_cache"], kernel_domain.index_operand(args.block_table, device),
                                              kernel_domain.index_operand(args.context_lens, device), seq_starts, t["key"], t["value"],
                                              int(args.layout), bool(args.cumsum))
    _write_back(args.key, t["key"])
    _write_back(args.value, t["value"])


def reshape_and_cache(args: ReshapeAndCacheArgs) -> None:
    """Run ``reshape_and_cache_kernel`` on the host; writes ``args.key_cache`` (and
    ``args.value_cache``) in place.

    Slot values are not checked: padding and out-of-range slots are skipped; a slot named twice
    keeps the last token naming it (one core writes each slot). Tensors outside the kernels' domain run on contiguous copies
    (caches copied back).
    """
    load()
    t = _in_domain(args)
    torch.ops.ascend_kv_host.reshape_and_cache(t["key"], t.get("value"), t["key_cache"], t.get("value_cache"),
                                               kernel_domain.index_operand(args.slot_mapping, args.key_cache.device), int(args.layout))
    _write_back(args.key_cache, t["key_cache"])
    _write_back(args.value_cache, t.get("value_cache"))


def block_copy(args: BlockCopyArgs) -> None:
    """Run ``block_copy_kernel`` on the host, one launch for every cache of the call; writes the caches in place.

    Index values are not checked: out-of-range blocks are skipped. Caches outside the kernels'
    domain (:func:`kernel_domain.outside_reason`) run on contiguous copies, copied back.
    """
    load()
    ran = tuple(cache if kernel_domain.block_rows(cache) is not None else cache.contiguous() for cache in args.caches)
    caches, src, dst, cum_sum = kernel_domain.block_copy_operands(BlockCopyArgs(ran, args.src, args.dst, args.cum_sum))
    if caches:
        torch.ops.ascend_kv_host.block_copy(caches, src, dst, cum_sum)
    for given, copy in zip(args.caches, ran):
        _write_back(given, copy)
