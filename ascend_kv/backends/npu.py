"""The NPU backend: the compiled AscendC kernels, called through their PyTorch op library.

The library (``libascend_kv_npu.so``, built by ``scripts/build_npu.sh`` or CMake on a host
with CANN) registers ``torch.ops.ascend_kv_npu.kv_cache`` and ``.paged_cache_load`` for
PyTorch's ``PrivateUse1`` device (the NPU). It is looked for at ``$ASCEND_KV_NPU_LIB`` when
that is set, else at ``ascend_kv/lib/libascend_kv_npu.so`` inside the installed package, and
loaded once, lazily, after torch_npu (which it links against).

Per call, the call's host metadata (lists of ints) goes to the device in one int64 copy
(views of one tensor feed the kernel's pointers); the binding computes the tiling on the host from the
shapes, copies it over, and queues the launch on torch_npu's current stream.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .. import device
from ..calls import KvCacheCall, PagedLoadCall

NAME = "npu"
LIBRARY_ENV = "ASCEND_KV_NPU_LIB"
LIBRARY_FILE = "libascend_kv_npu.so"
DEFAULT_LIBRARY = Path(__file__).resolve().parent.parent / "lib" / LIBRARY_FILE
NAMESPACE = "ascend_kv_npu"
OPS = ("kv_cache", "paged_cache_load")


@dataclass(frozen=True)
class LibraryStatus:
    """Whether the kernel library is loaded.

    Attributes
    ----------
    loaded : bool
        The library is loaded and registered every op of :data:`OPS`.
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


@functools.cache
def library() -> LibraryStatus:
    """Load the kernel library once; never raises (the reason is kept instead)."""
    path = library_path()
    if not path.is_file():
        where = f"${LIBRARY_ENV}" if os.environ.get(LIBRARY_ENV, "").strip() else "the package"
        return LibraryStatus(
            False, str(path), f"{path} does not exist (looked in {where}); build it with scripts/build_npu.sh "
            f"on a host with CANN, or point {LIBRARY_ENV} at it"
        )
    imported = device.torch_npu()
    if imported.module is None:
        return LibraryStatus(False, str(path), f"torch_npu is not loaded, and the library needs it: {imported.reason}")
    try:
        torch.ops.load_library(str(path))
    except Exception as error:
        return LibraryStatus(False, str(path), f"{type(error).__name__}: {error}")
    missing = [op for op in OPS if not hasattr(getattr(torch.ops, NAMESPACE), op)]
    if missing:
        return LibraryStatus(False, str(path), f"{path} does not register torch.ops.{NAMESPACE}.{', '.join(missing)}")
    return LibraryStatus(True, str(path), None)


def to_device(values: list[np.ndarray | list[int]], device: torch.device) -> list[torch.Tensor]:
    """Host integers (arrays or lists) as int64 tensors on ``device``: one transfer, one view each (same shapes)."""
    arrays = [np.asarray(v, dtype=np.int64) for v in values]
    flat = np.concatenate([np.ravel(a) for a in arrays])
    on_device = torch.from_numpy(flat).to(device)
    views, start = [], 0
    for a in arrays:
        views.append(on_device[start : start + a.size].view(a.shape))
        start += a.size
    return views


def kv_cache(call: KvCacheCall) -> None:
    """Run a validated ``kv_cache`` call on the NPU kernels (writes ``call.past``)."""
    seq_len, read_start, write_start = to_device([call.seq_len, call.read_start, call.write_start], call.past.device)
    getattr(torch.ops, NAMESPACE).kv_cache(call.new_kv.contiguous(), call.past, call.layer_id, seq_len, read_start, write_start)


def paged_cache_load(call: PagedLoadCall) -> None:
    """Run a validated ``paged_cache_load`` call on the NPU kernels (writes ``call.key``, ``call.value``)."""
    batch = len(call.lens)
    host_table = np.asarray(call.block_table, dtype=np.int64).reshape(batch, call.table_columns)  # also batch 0
    table, lens, out_start, first_column = to_device(
        [host_table, call.lens, call.out_start, call.first_column], call.key_cache.device
    )
    getattr(torch.ops, NAMESPACE).paged_cache_load(
        call.key_cache, call.value_cache, call.key, call.value, table, lens, out_start, first_column,
        call.num_tokens, int(call.layout),
    )
