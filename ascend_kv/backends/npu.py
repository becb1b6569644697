"""The NPU backend: the compiled AscendC kernels, called through their PyTorch op library.

The library (``libascend_kv_npu.so``, built by ``scripts/build_npu.sh`` of a source checkout,
or by ``pip install`` from the source, on a host with CANN) registers ``torch.ops.ascend_kv_npu.kv_cache``,
``.paged_cache_load``, ``.reshape_and_cache`` and ``.block_copy`` for
PyTorch's ``PrivateUse1`` device (the NPU). It is looked for at ``$ASCEND_KV_NPU_LIB`` when
that is set, else at ``ascend_kv/lib/libascend_kv_npu.so`` inside the installed package, and
loaded once, lazily. The kernels' host build registers the same operators as
``torch.ops.ascend_kv_host`` for the CPU and ``PrivateUse1``; pointed at by
``$ASCEND_KV_NPU_LIB``, it stands in for the kernel library on a device whose tensors hold host
memory (the fake NPU of the tests).

Per call the index tensors are already on the device (:mod:`ascend_kv.operators.upload` moved the host
ones); the kernels read them there, so nothing is read back to the host.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..rules.forms import BlockCopyArgs, KvCacheArgs, PagedLoadArgs, ReshapeAndCacheArgs
from .kernel_domain import block_copy_operands, index_operand

NAME = "npu"
LIBRARY_ENV = "ASCEND_KV_NPU_LIB"
LIBRARY_FILE = "libascend_kv_npu.so"
DEFAULT_LIBRARY = Path(__file__).resolve().parent.parent / "lib" / LIBRARY_FILE
NAMESPACES = ("ascend_kv_npu", "ascend_kv_host")  # the NPU build, then the host build standing in for it
OPS = ("kv_cache", "paged_cache_load", "reshape_and_cache", "block_copy")


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
    namespace : str or None
        The ``torch.ops`` namespace of its operators (one of :data:`NAMESPACES`).
    """

    loaded: bool
    path: str
    reason: str | None
    namespace: str | None = None


def library_path() -> Path:
    """``$ASCEND_KV_NPU_LIB`` when set, else :data:`DEFAULT_LIBRARY`."""
    configured = os.environ.get(LIBRARY_ENV, "").strip()
    return Path(configured) if configured else DEFAULT_LIBRARY


def _registered_namespace() -> str | None:
    for namespace in NAMESPACES:
        if all(hasattr(getattr(torch.ops, namespace), op) for op in OPS):
            return namespace
    return None


def _build_hint() -> str:
    """How to build the library: the build script in a source checkout, a source install for an installed package."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "build_npu.sh"
    if script.is_file():
        return f"build it on a host with CANN with {script}"
    return ("it is built when ascend_kv is installed from its source on a host with CANN "
            "(`source set_env.sh`, then `pip install --no-build-isolation .` in the source tree)")


@functools.cache
def library() -> LibraryStatus:
    """Load the kernel library once; never raises (the reason is kept instead)."""
    path = library_path()
    if not path.is_file():
        where = f"${LIBRARY_ENV}" if os.environ.get(LIBRARY_ENV, "").strip() else "the package"
        return LibraryStatus(False, str(path), f"{path} does not exist (looked in {where}); {_build_hint()}, "
                                               f"or point {LIBRARY_ENV} at it")
    try:
        torch.ops.load_library(str(path))
    except Exception as error:  # e.g. torch_npu's libraries missing: the loader's message says which
        return LibraryStatus(False, str(path), f"{type(error).__name__}: {error}")
    namespace = _registered_namespace()
    if namespace is None:
        return LibraryStatus(
            False, str(path), f"{path} does not register {', '.join(OPS)} in torch.ops.{' or torch.ops.'.join(NAMESPACES)}"
        )
    return LibraryStatus(True, str(path), None, namespace)


def _ops() -> Any:
    """The operators of the loaded library."""
    return getattr(torch.ops, library().namespace or NAMESPACES[0])


def kv_cache(args: KvCacheArgs) -> None:
    """Run ``kv_cache`` on the NPU kernels (writes ``args.past``); the kernels read the index tensors on the device."""
    device, layer = args.past.device, args.layer_id
    _ops().kv_cache(
        args.new_kv, args.past, index_operand(args.token_offset, device), index_operand(args.seq_len, device),
        index_operand(layer, device) if isinstance(layer, torch.Tensor) else None,
        0 if isinstance(layer, torch.Tensor) else layer,
    )


def paged_cache_load(args: PagedLoadArgs) -> None:
    """Run ``paged_cache_load`` on the NPU kernels (writes ``args.key``, ``args.value``)."""
    device = args.key_cache.device
    starts = None if args.seq_starts is None else index_operand(args.seq_starts, device)
    _ops().paged_cache_load(
        args.key_cache, args.value_cache, index_operand(args.block_table, device),
        index_operand(args.context_lens, device), starts, args.key, args.value, int(args.layout), args.cumsum,
    )


def reshape_and_cache(args: ReshapeAndCacheArgs) -> None:
    """Run ``reshape_and_cache`` on the NPU kernels (writes ``args.key_cache``, ``args.value_cache``)."""
    _ops().reshape_and_cache(args.key, args.value, args.key_cache, args.value_cache,
                             index_operand(args.slot_mapping, args.key_cache.device), int(args.layout))


def block_copy(args: BlockCopyArgs) -> None:
    """Run ``block_copy`` (and ``copy_blocks``) on the NPU kernel, one launch for every cache of the call."""
    caches, src, dst, cum_sum = block_copy_operands(args)
    if caches:
        _ops().block_copy(caches, src, dst, cum_sum)
