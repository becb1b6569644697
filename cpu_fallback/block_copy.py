"""Whole-block copies: ``block_copy`` / ``copy_blocks`` on host caches, and ``swap_blocks`` on any devices.

Each cache is copied on its own, by the first way that applies:

``native``
    Host tensors, the compiled copier built, a block's rows (:func:`.strides.block_rows`) whole
    32-byte multiples: one C call copies every block, one run of rows each, straight from its
    source block to its destination block (no temporary).
``indexed``
    Anything else: one ``index_select`` of the source blocks and one ``index_copy_`` into the
    destinations, on integer views of the bits (any strides).

``swap_blocks`` between devices moves the gathered blocks in one copy each way (from pinned
memory, non-blocking) and never waits for a device: host to device gathers on the host into
pinned memory, copies, and scatters on the device; device to host gathers on the device and
copies each run of consecutive destination blocks straight into ``dst`` (one copy for the
usual run of fresh host blocks), since a scatter on the host would have to wait for the data.
"""

from __future__ import annotations

import numpy as np
import torch

from ascend_kv.operators.upload import to_device
from ascend_kv.rules.forms import BlockCopyPlan, SwapBlocksPlan

from . import native
from .on_device import _bits
from .strides import block_rows

#: Bytes written by one call from which the copier streams them past the CPU caches (as for
#: ``reshape_and_cache``: forked or swapped-in blocks are read back by a later step, not now).
STREAM_MIN_BYTES = 1 << 20


def paths(call: BlockCopyPlan) -> tuple[str, ...]:
    """The way :func:`block_copy` copies each cache of the call, in order."""
    return tuple("native" if _native_rows(cache, cache) is not None else "indexed" for cache in call.args.caches)


def block_copy(call: BlockCopyPlan) -> None:
    """Copy block ``call.sources[j]`` of every cache to its block ``call.destinations[j]``, in place.

    Parameters
    ----------
    call : BlockCopyPlan
        Checked values: blocks in range, destinations distinct and none a source, so the copies
        may run in any order.
    """
    if not call.destinations:
        return
    written = len(call.destinations) * sum(cache.nbytes // cache.shape[0] for cache in call.args.caches if cache.shape[0])
    stream_min_bytes = 0 if written >= STREAM_MIN_BYTES else STREAM_MIN_BYTES
    for cache in call.args.caches:
        if cache.numel() == 0:
            continue
        if not _copy_natively(cache, cache, call.sources, call.destinations, stream_min_bytes):
            _indexed(cache, cache, call.sources, call.destinations)


def swap_blocks(args: SwapBlocksPlan) -> None:
    """Copy block ``args.sources[i]`` of ``args.src`` to block ``args.destinations[i]`` of ``args.dst``.

    ``src`` and ``dst`` on one device: as :func:`block_copy`. Between devices, without waiting for
    either (see the module's text); the copies are queued on the devices' current streams.
    """
    src, dst, sources, destinations = args.src, args.dst, args.sources, args.destinations
    if not destinations or src[0].numel() == 0:
        return
    if src.device == dst.device:
        if not _copy_natively(src, dst, sources, destinations, STREAM_MIN_BYTES):
            source_index, target_index = to_device([torch.tensor(sources), torch.tensor(destinations)], dst.device)
            _indexed(src, dst, source_index, target_index)
        return
    if src.is_cpu:
        gathered = _pinned((len(sources), *src.shape[1:]), src.dtype)
        torch.index_select(_bits(src), 0, torch.tensor(sources), out=_bits(gathered))
        moved = gathered.to(dst.device, non_blocking=True)
        (target_index,) = to_device([torch.tensor(destinations)], dst.device)
        _bits(dst).index_copy_(0, target_index, _bits(moved))
        return
    order = np.argsort(np.asarray(destinations, dtype=np.int64), kind="stable")
    targets = np.asarray(destinations, dtype=np.int64)[order]
    (source_index,) = to_device([torch.from_numpy(np.asarray(sources, dtype=np.int64)[order])], src.device)
    gathered = _bits(src).index_select(0, source_index)                  # [n, ...] in destination order
    if dst.device.type != "cpu":                                          # device to device: one copy, one scatter
        (target_index,) = to_device([torch.from_numpy(targets)], dst.device)
        _bits(dst).index_copy_(0, target_index, gathered.to(dst.device, non_blocking=True))
        return
    starts = np.flatnonzero(np.diff(targets, prepend=-2) != 1).tolist()  # runs of consecutive destinations
    for begin, end in zip(starts, [*starts[1:], len(targets)]):
        first = int(targets[begin])
        _bits(dst)[first : first + end - begin].copy_(gathered[begin:end], non_blocking=True)


def _pinned(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A host tensor in pinned memory where the build has it (else pageable: the copy then blocks)."""
    try:
        return torch.empty(shape, dtype=dtype, pin_memory=True)
    except RuntimeError:
        return torch.empty(shape, dtype=dtype)


def _native_rows(src: torch.Tensor, dst: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(src, dst)`` as ``[blocks, rows, row]`` views the copier takes (rows of whole 32-byte
    multiples, the same rows in both), or None."""
    if not native.usable(src, dst):
        return None
    views = (block_rows(src),) * 2 if src is dst else (block_rows(src), block_rows(dst))
    if views[0] is None or views[1] is None or views[0].shape[1:] != views[1].shape[1:]:
        return None
    row_bytes = views[0].shape[2] * src.element_size()
    return (views[0], views[1]) if row_bytes % 32 == 0 and row_bytes > 0 else None


def _copy_natively(src: torch.Tensor, dst: torch.Tensor, sources: list[int], destinations: list[int],
                   stream_min_bytes: int) -> bool:
    """One copier call, run ``j`` the rows of block ``sources[j]`` to block ``destinations[j]``; False
    (nothing copied) when the copier cannot take the tensors."""
    views = _native_rows(src, dst)
    if views is None:
        return False
    source, target = views
    size = src.element_size()
    rows = source.shape[1]
    native.copy_runs(source.data_ptr(), target.data_ptr(), sources, destinations, None if rows == 1 else [rows] * len(destinations),
                     index_steps=(source.stride(0) * size, target.stride(0) * size), item_bytes=source.shape[2] * size,
                     steps=(source.stride(1) * size, target.stride(1) * size), stream_min_bytes=stream_min_bytes)
    return True


def _indexed(src: torch.Tensor, dst: torch.Tensor, sources: list[int] | torch.Tensor,
             destinations: list[int] | torch.Tensor) -> None:
    """``dst[destinations[j]] = src[sources[j]]`` by one gather and one scatter of the bits (any strides)."""
    source_index = sources if isinstance(sources, torch.Tensor) else torch.tensor(sources, dtype=torch.int64)
    target_index = destinations if isinstance(destinations, torch.Tensor) else torch.tensor(destinations,
                                                                                                dtype=torch.int64)
    _bits(dst).index_copy_(0, target_index, _bits(src).index_select(0, source_index))
