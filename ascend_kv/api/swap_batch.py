"""The batched pointer copies, each one operator call whose rules are in C++: ``swap_blocks_batch``,
vLLM's offload copy (docs/semantics.md §11.2-11.3), with vllm-ascend's ``(src_ptrs, dst_ptrs, sizes,
direction)`` call accepted; ``batch_memcpy``, vLLM's mamba state copy from tables on the device (§14.3).
"""

from __future__ import annotations

import torch

from . import arguments as common


def swap_blocks_batch(
    src_ptrs: torch.Tensor,
    dst_ptrs: torch.Tensor,
    sizes: torch.Tensor,
    is_src_access_order_any: bool | int = False,
    *,
    direction: int | None = None,
) -> None:
    """Copy ``sizes[i]`` bytes from address ``src_ptrs[i]`` to ``dst_ptrs[i]`` for every ``i`` (vLLM's ``swap_blocks_batch``).

    KV offload between device blocks and host memory as raw addresses (vLLM's CPU offload
    worker): any order, queued on the current stream. On an NPU, one runtime call for the batch
    (``aclrtMemcpyBatchAsync`` with CANN 8.5 or later, else one ``aclrtMemcpyAsync`` per copy),
    never a synchronisation; without a device runtime every copy is a host ``memcpy``.

    Parameters
    ----------
    src_ptrs, dst_ptrs, sizes : torch.Tensor
        ``[n]`` int64 on the host: addresses and byte counts (``sizes[i] >= 0``; zero-size
        copies are skipped). The addresses are trusted, as in vLLM: a raw address cannot be
        bounds-checked. Destination ranges must meet neither each other nor any source range.
    is_src_access_order_any : bool, optional
        vLLM's hint; accepted and not needed (stream order is always correct). An ``int`` here
        (not a bool) is vllm-ascend's ``direction``: ``swap_blocks_batch(x, y, z, 1)``.
    direction : int or None, optional
        None (inferred), 0 host to device, 1 device to host, 2 device to device.

    Raises
    ------
    TypeError
        A table that is not an int64 tensor, a direction that is not an int.
    ValueError
        A shape, length, size, direction or overlap rule broken, naming the entry. Nothing is copied.

    Examples
    --------
    >>> src, dst = torch.arange(8, dtype=torch.uint8), torch.zeros(8, dtype=torch.uint8)
    >>> ptrs = lambda t, *offsets: torch.tensor([t.data_ptr() + o for o in offsets])
    >>> ascend_kv.swap_blocks_batch(ptrs(src, 0, 4), ptrs(dst, 4, 0), torch.tensor([4, 2]))
    >>> dst.tolist()
    [4, 5, 0, 0, 0, 1, 2, 3]
    """
    if type(is_src_access_order_any) is not bool:
        if direction is not None:
            raise TypeError("swap_blocks_batch got direction twice (a 4th positional int is vllm-ascend's direction)")
        direction, is_src_access_order_any = common.int64_argument("direction", is_src_access_order_any), False
    elif direction is not None:
        direction = common.int64_argument("direction", direction)
    for name, value in (("src_ptrs", src_ptrs), ("dst_ptrs", dst_ptrs), ("sizes", sizes)):
        if type(value) is not torch.Tensor:
            common.tensor_argument(name, value)
    torch.ops.ascend_kv.swap_blocks_batch(src_ptrs, dst_ptrs, sizes, is_src_access_order_any,
                                          -1 if direction is None else direction)


def batch_memcpy(src_ptrs: torch.Tensor, dst_ptrs: torch.Tensor, sizes: torch.Tensor) -> None:
    """Copy ``sizes[i]`` bytes from address ``src_ptrs[i]`` to ``dst_ptrs[i]`` for every ``i`` (vLLM's
    ``batch_memcpy`` of ``vllm.v1.worker.mamba_utils``).

    vLLM's hybrid models copy mamba state ranges with it (prefix caching's "align" mode), the tables
    built on the host and copied to the device. On an NPU with ascend_kv's kernels (Atlas A2/A3),
    one kernel launch reads the tables in device memory and copies every range: no Triton, no
    read back, no synchronisation (capturable in a graph).

    Parameters
    ----------
    src_ptrs, dst_ptrs : torch.Tensor
        ``[n]`` int64 addresses, on one device with ``sizes``.
    sizes : torch.Tensor
        ``[n]`` int32 (as vLLM keeps them) or int64 byte counts.

        Tables on the host: checked before anything is copied (``sizes[i] >= 0``; destination
        ranges meet neither each other nor any source range), then one ``memcpy`` per range over
        torch's threads (with an NPU runtime: its batched copy, as :func:`swap_blocks_batch`).
        Tables on a device: the addresses are that device's memory; nothing is read back (the
        device fallback, where the kernels do not run, reads the tables once), a size ``<= 0``
        copies nothing, overlapping ranges are undefined. The addresses themselves are trusted.

    Raises
    ------
    TypeError
        A table that is not a tensor or of another dtype.
    ValueError
        A table's shape, a length, a size or an overlap (host tables), naming the entry. Nothing
        is copied.

    Examples
    --------
    >>> src, dst = torch.arange(8, dtype=torch.uint8), torch.zeros(8, dtype=torch.uint8)
    >>> ptrs = lambda t, *offsets: torch.tensor([t.data_ptr() + o for o in offsets])
    >>> ascend_kv.batch_memcpy(ptrs(src, 0, 6), ptrs(dst, 4, 0), torch.tensor([4, 2], dtype=torch.int32))
    >>> dst.tolist()
    [6, 7, 0, 0, 0, 1, 2, 3]
    """
    for name, value in (("src_ptrs", src_ptrs), ("dst_ptrs", dst_ptrs), ("sizes", sizes)):
        if type(value) is not torch.Tensor:
            common.tensor_argument(name, value)
    torch.ops.ascend_kv.batch_memcpy(src_ptrs, dst_ptrs, sizes)
