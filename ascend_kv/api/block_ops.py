"""The public block operations: ``block_copy`` (ATB BlockCopyOperation), vLLM's ``copy_blocks`` and
``swap_blocks``. Each checks that its arguments are tensors and calls its operator, once
(``torch.ops.ascend_kv``, C++), so ``torch.compile`` traces a call as exactly one operator.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from . import arguments as common
from .params import BlockCopyParam


def block_copy(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor | None,
    src_block_indices: torch.Tensor,
    dst_block_indices: torch.Tensor,
    cum_sum: torch.Tensor,
    *,
    simultaneous: bool = False,
) -> None:
    """Copy whole cache blocks in place, one source to one or more destinations (ATB BlockCopyOperation).

    Block ``src_block_indices[i]`` of each cache goes to every block
    ``dst_block_indices[cum_sum[i-1]:cum_sum[i]]`` (``cum_sum[-1]`` read as 0): beam search
    forking a sequence's last block before writing into it (copy-on-write), prefix caching.

    Parameters
    ----------
    key_cache : torch.Tensor
        ``[num_blocks, ...]``, dim 0 the block: ND ``[num_blocks, block_size, num_heads,
        head_size]`` or NZ ``[num_blocks, T // E, block_size, E]`` alike; any 1-, 2- or 4-byte
        dtype the package takes. Strided views are copied in place (column slices of a wider
        buffer, K and V held block by block in one buffer).
    value_cache : torch.Tensor or None
        As ``key_cache`` (its dtype and block shape may differ), the same ``num_blocks``; None
        for key-only (MLA) caches.
    src_block_indices : torch.Tensor
        ``[n]`` int32 or int64 source blocks, in ``[0, num_blocks)``.
    dst_block_indices : torch.Tensor
        ``[m]`` int32 or int64 destination blocks, in ``[0, num_blocks)``, distinct, none of them
        a source (unless ``simultaneous``).
    cum_sum : torch.Tensor
        ``[n]`` int32 or int64: running end of each source's destinations, non-decreasing,
        ``cum_sum[-1] == m``.
    simultaneous : bool, optional
        False (default): ATB's rules. True: every source block is read before any destination
        is written, so cycles (a->b, b->a), chains (a->b, b->c: c gets b's old bytes),
        self-copies and overlapping fan-out are defined; a destination is still named once.

    Index tensors on the host are checked (nothing is written on an error); on the caches'
    device they are read by the kernels or the device fallback, which skip out-of-range blocks.
    A view identical to another (device, ``data_ptr()``, dtype, shape, strides) is copied once.

    Raises
    ------
    TypeError
        A wrong type or dtype. Nothing is written.
    ValueError
        A wrong shape or index value. Nothing is written.

    Examples
    --------
    >>> cache = torch.arange(4 * 2, dtype=torch.float16).reshape(4, 2, 1, 1)
    >>> ascend_kv.block_copy(cache, None, torch.tensor([0]), torch.tensor([2, 3]), torch.tensor([2]))
    >>> cache[:, 0, 0, 0].tolist()
    [0.0, 2.0, 0.0, 0.0]
    """
    _tensors(key_cache=key_cache, src_block_indices=src_block_indices, dst_block_indices=dst_block_indices,
             cum_sum=cum_sum)
    if value_cache is not None:
        _tensors(value_cache=value_cache)
    torch.ops.ascend_kv.block_copy(key_cache, value_cache, src_block_indices, dst_block_indices, cum_sum,
                                   _flag(simultaneous))


def copy_blocks(
    key_caches: Sequence[torch.Tensor],
    value_caches: Sequence[torch.Tensor],
    block_mapping: torch.Tensor,
    *,
    simultaneous: bool = False,
) -> None:
    """Copy cache blocks of every layer in place, ``(src, dst)`` pairs (vLLM's ``copy_blocks``).

    For each pair ``(s, d)`` of ``block_mapping``, block ``s`` of every layer's key and value
    cache goes to block ``d``: all layers in one call (one kernel launch on the NPU).

    Parameters
    ----------
    key_caches : sequence of torch.Tensor
        One cache per layer, each as ``block_copy``'s ``key_cache``; all on one device with one
        ``num_blocks`` (per-layer views of one buffer are fine; segments of one allocation may
        differ in dtype and block shape; a view listed for several layers is copied once).
    value_caches : sequence of torch.Tensor
        One per layer as well, or empty for key-only (MLA) caches.
    block_mapping : torch.Tensor
        ``[n, 2]`` int32 or int64 ``(src, dst)`` pairs, on the host or the caches' device; the
        rules of ``block_copy`` apply per pair.
    simultaneous : bool, optional
        As :func:`block_copy`'s: every source read before any destination is written.

    Raises
    ------
    TypeError, ValueError
        As :func:`block_copy`. Nothing is written.

    Examples
    --------
    >>> layers = [torch.zeros(4, 16, 2, 8, dtype=torch.float16) for _ in range(2)]
    >>> ascend_kv.copy_blocks(layers, [c.clone() for c in layers], torch.tensor([[0, 3], [1, 2]]))
    """
    keys, values = _tensor_list("key_caches", key_caches), _tensor_list("value_caches", value_caches)
    _tensors(block_mapping=block_mapping)
    torch.ops.ascend_kv.copy_blocks(keys, values, block_mapping, _flag(simultaneous))


def swap_blocks(src: torch.Tensor, dst: torch.Tensor, *args: object, **kwargs: object) -> None:
    """Copy blocks from one tensor to another, on one device or between devices (vLLM's ``swap_blocks``).

    Two forms, told apart by the number of arguments after ``dst``:

    - ``swap_blocks(src, dst, block_mapping)``: block ``block_mapping[i, 0]`` (dim 0) of ``src``
      goes to block ``block_mapping[i, 1]`` of ``dst`` (operator ``swap_blocks``);
    - ``swap_blocks(src, dst, block_size_in_bytes, block_mapping)`` (vLLM's current form): block
      ``m`` of a tensor is its bytes ``[m * B, (m + 1) * B)`` from ``data_ptr()``; bytes
      ``[s * B, (s + 1) * B)`` of ``src`` go to ``[d * B, (d + 1) * B)`` of ``dst`` for each
      pair ``(s, d)``, whatever the dtypes (operator ``swap_blocks.bytes``). ``B`` need not be a
      block's stride: GPU pages can go into halves of 2-page host blocks.

    KV offload to host memory and back, preemption. From or to pinned host memory the copies are
    non-blocking, queued on the device's current stream; the call never synchronises, and
    consecutive pairs go as one copy.

    Parameters
    ----------
    src : torch.Tensor
        ``[src_blocks, ...]``, read (the bytes form: any contiguous tensor).
    dst : torch.Tensor
        Written, on ``src``'s device or another, apart from ``src``. The 3-argument form:
        ``[dst_blocks, ...]`` with ``src.shape[1:]`` and ``src.dtype``; the bytes form: any
        contiguous tensor.
    block_size_in_bytes : int
        The bytes form only: ``B``, positive.
    block_mapping : torch.Tensor
        ``[n, 2]`` int32 or int64 ``(src block, dst block)`` pairs on the host; blocks in range,
        destinations distinct.

    Raises
    ------
    TypeError, ValueError
        A wrong type, dtype, shape or index value. Nothing is written.

    Examples
    --------
    >>> gpu = torch.zeros(8, 16, 2, 8, dtype=torch.float16)
    >>> host = torch.empty(4, 16, 2, 8, dtype=torch.float16)   # pin_memory=True on an NPU host
    >>> ascend_kv.swap_blocks(gpu, host, torch.tensor([[5, 0], [6, 1]]))
    >>> ascend_kv.swap_blocks(gpu, host, 256, torch.tensor([[5, 0], [6, 3]]))   # 256-byte blocks
    """
    bytes_form = len(args) + len(kwargs) == 2 or "block_size_in_bytes" in kwargs
    names = ("block_size_in_bytes", "block_mapping") if bytes_form else ("block_mapping",)
    bound = _bind(names, args, kwargs)
    block_mapping = bound["block_mapping"]
    _tensors(src=src, dst=dst, block_mapping=block_mapping)
    if not bytes_form:
        torch.ops.ascend_kv.swap_blocks(src, dst, block_mapping)
        return
    size = bound["block_size_in_bytes"]
    if type(size) is not int:
        if isinstance(size, torch.Tensor):
            raise TypeError(f"block_size_in_bytes must be an int, got {common.describe(size)}")
        size = common.int64_argument("block_size_in_bytes", size)
    torch.ops.ascend_kv.swap_blocks.bytes(src, dst, size, block_mapping)


def _bind(names: tuple[str, ...], args: tuple[object, ...], kwargs: dict[str, object]) -> dict[str, object]:
    """``swap_blocks``' arguments after ``dst`` by name, positional ones first, or ``TypeError`` as Python gives."""
    if len(args) > len(names):
        raise TypeError(f"swap_blocks takes 3 or 4 arguments (src, dst, [block_size_in_bytes,] block_mapping), "
                        f"got {2 + len(args)} positional")
    bound = dict(zip(names, args))
    for name, value in kwargs.items():
        if name not in names or name in bound:
            raise TypeError(f"swap_blocks got an unexpected or repeated argument {name!r} (its form takes "
                            f"src, dst, {', '.join(names)})")
        bound[name] = value
    missing = [name for name in names if name not in bound]
    if missing:
        raise TypeError(f"swap_blocks missing argument {missing[0]!r} (src, dst, [block_size_in_bytes,] block_mapping)")
    return bound


def _flag(simultaneous: object) -> bool:
    return simultaneous if simultaneous is True or simultaneous is False else common.bool_argument(
        "simultaneous", simultaneous)


def _tensors(**arguments: object) -> None:
    for name, value in arguments.items():
        if type(value) is not torch.Tensor:
            common.tensor_argument(name, value)


def _tensor_list(name: str, value: object) -> list[torch.Tensor]:
    """``value`` as a list of tensors (one per layer), or ``TypeError``."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list of tensors (one per layer), got {type(value).__name__}")
    for i, tensor in enumerate(value):
        if type(tensor) is not torch.Tensor:
            common.tensor_argument(f"{name}[{i}]", tensor)
    return list(value)


class BlockCopyOperation:
    """ATB-style object for :func:`block_copy`, for code ported from ATB's C++ API.

    Parameters
    ----------
    param : BlockCopyParam, optional
        Has no fields (ATB's struct is reserved bytes only).

    Examples
    --------
    >>> op = ascend_kv.BlockCopyOperation(ascend_kv.BlockCopyParam())
    >>> op(key_cache, value_cache, src_block_indices, dst_block_indices, cum_sum)
    """

    def __init__(self, param: BlockCopyParam | None = None) -> None:
        if param is None:
            param = BlockCopyParam()
        if not isinstance(param, BlockCopyParam):
            raise TypeError(f"param must be a BlockCopyParam, got {type(param).__name__}")
        self.param = param

    def __call__(
        self,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor | None,
        src_block_indices: torch.Tensor,
        dst_block_indices: torch.Tensor,
        cum_sum: torch.Tensor,
    ) -> None:
        """Run :func:`block_copy`."""
        block_copy(key_cache, value_cache, src_block_indices, dst_block_indices, cum_sum)
