"""Transfer-ready KV caches: every layer's K and V (and scale caches) in one aligned allocation,
block-indexed, with the descriptor a peer needs to move their blocks (docs/semantics.md §17.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..api import arguments as common
from .descriptor import LAYOUTS, CacheDescriptor, Segment, block_bytes

#: HCCS registrations and huge pages: 2 MiB.
DEFAULT_ALIGNMENT = 2 << 20


@dataclass(frozen=True)
class TransferCaches:
    """The caches of :func:`allocate_transfer_caches`.

    Attributes
    ----------
    key_caches, value_caches : list of torch.Tensor
        Per layer, ``[num_blocks, *block]`` in the descriptor's layout (``value_caches`` empty for
        key-only caches): contiguous views of :attr:`buffer`.
    key_scale_caches, value_scale_caches : list of torch.Tensor
        Per layer, ``[num_blocks, block_size, num_heads]`` (ND-indexed, as reshape_and_cache's
        ``k_scale_cache``), or empty.
    buffer : torch.Tensor
        The one ``uint8`` allocation all of them are views of, its start aligned.
    descriptor : CacheDescriptor
        What a peer needs to move their blocks.
    """

    key_caches: list[torch.Tensor]
    value_caches: list[torch.Tensor]
    key_scale_caches: list[torch.Tensor]
    value_scale_caches: list[torch.Tensor]
    buffer: torch.Tensor
    descriptor: CacheDescriptor

    def caches(self, name: str) -> list[torch.Tensor]:
        """The per-layer caches of segment ``name`` (``"key"``, ``"value"``, ``"key_scale"``, ``"value_scale"``)."""
        return {"key": self.key_caches, "value": self.value_caches, "key_scale": self.key_scale_caches,
                "value_scale": self.value_scale_caches}[name]


def block_shape(layout: str, block_size: int, num_heads: int, head_size: int, dtype: torch.dtype) -> tuple[int, ...]:
    """One block of a data cache in ``layout`` (gather_blocks' layouts; NZ pieces of ``E = 32 // itemsize``)."""
    if layout == "nd":
        return (block_size, num_heads, head_size)
    if layout == "hnd":
        return (num_heads, block_size, head_size)
    pieces = common.nz_elements(dtype)
    if (num_heads * head_size) % pieces or block_size % 16:
        raise ValueError(f"layout 'nz' needs num_heads * head_size ({num_heads * head_size}) a multiple of "
                         f"{pieces} and block_size ({block_size}) a multiple of 16")
    return (num_heads * head_size // pieces, block_size, pieces)


def allocate_transfer_caches(
    num_layers: int,
    num_blocks: int,
    block_size: int,
    num_heads: int,
    head_size: int,
    dtype: torch.dtype = torch.float16,
    *,
    layout: str = "nd",
    key_only: bool = False,
    scale_dtype: torch.dtype | None = None,
    device: torch.device | str = "cpu",
    pin_memory: bool = False,
    alignment: int = DEFAULT_ALIGNMENT,
    tp_rank: int = 0,
    tp_size: int = 1,
    head_start: int | None = None,
    total_heads: int | None = None,
) -> TransferCaches:
    """Allocate every layer's K and V cache, ready to be sent: one aligned allocation, block-indexed.

    The allocation holds the segments ``key`` (every layer's K cache, layer after layer), ``value``,
    then with ``scale_dtype`` ``key_scale`` and ``value_scale``; each segment starts on an
    ``alignment`` boundary and the allocation's size is a multiple of it, so a transfer engine
    registers it as one region (HCCS wants 2 MiB). Each ``(layer, segment, block)`` is one
    contiguous byte range, and a run of consecutive blocks of a layer is one too.

    Parameters
    ----------
    num_layers, num_blocks, block_size : int
        Layers, blocks per cache, tokens per block.
    num_heads, head_size : int
        KV heads held by this process (its TP rank's) and elements per head.
    dtype : torch.dtype
        The data caches' element type (``int8`` for quantized caches).
    layout : str
        ``"nd"`` ``[nb, bs, H, D]``, ``"hnd"`` ``[nb, H, bs, D]`` or ``"nz"`` ``[nb, H*D // E, bs, E]``.
    key_only : bool
        No value caches (MLA).
    scale_dtype : torch.dtype or None
        With a dtype: per-token scale caches ``[nb, bs, H]`` beside K and V (reshape_and_cache's
        ``k_scale_cache`` / ``v_scale_cache``).
    device : torch.device or str
        ``"cpu"`` or an NPU.
    pin_memory : bool
        Page-locked host memory (needs an accelerator runtime, e.g. torch_npu).
    alignment : int
        A power of two: the allocation's start, each segment's start and its size are multiples of it.
    tp_rank, tp_size : int
        This process's tensor-parallel rank and size.
    head_start, total_heads : int or None
        This rank's first head and the model's KV heads (default ``tp_rank * num_heads`` and
        ``tp_size * num_heads``: an even split).

    Returns
    -------
    TransferCaches
        The per-layer views and the descriptor.

    Raises
    ------
    TypeError, ValueError
        A wrong type, a non-positive size, an alignment that is not a power of two, a head range
        outside the model's, an NZ geometry that does not hold whole pieces.

    Examples
    --------
    >>> caches = ascend_kv.transfer.allocate_transfer_caches(2, 8, 16, 2, 16, alignment=4096)
    >>> caches.key_caches[1].shape, len(caches.descriptor.regions)
    (torch.Size([8, 16, 2, 16]), 1)
    """
    sizes = {name: common.int_argument(name, value) for name, value in
             (("num_layers", num_layers), ("num_blocks", num_blocks), ("block_size", block_size),
              ("num_heads", num_heads), ("head_size", head_size), ("tp_size", tp_size))}
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    rank = common.int_argument("tp_rank", tp_rank)
    if not 0 <= rank < sizes["tp_size"]:
        raise ValueError(f"tp_rank must be in [0, tp_size = {sizes['tp_size']}), got {rank}")
    heads = sizes["num_heads"]
    first = rank * heads if head_start is None else common.int_argument("head_start", head_start)
    model_heads = sizes["tp_size"] * heads if total_heads is None else common.int_argument("total_heads", total_heads)
    if first < 0 or first + heads > model_heads:
        raise ValueError(f"head_start = {first} with num_heads = {heads} must lie in the model's "
                         f"total_heads = {model_heads}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    align = common.int_argument("alignment", alignment)
    if align < 1 or align & (align - 1):
        raise ValueError(f"alignment must be a power of two, got {align}")
    for name, given in (("dtype", dtype), ("scale_dtype", scale_dtype)):
        if given is not None and not isinstance(given, torch.dtype):
            raise TypeError(f"{name} must be a torch.dtype, got {common.describe(given)}")
    layers, nb, bs, d = sizes["num_layers"], sizes["num_blocks"], sizes["block_size"], sizes["head_size"]

    shapes = {"key": (dtype, block_shape(layout, bs, heads, d, dtype))}
    if not common.bool_argument("key_only", key_only):
        shapes["value"] = shapes["key"]
    if scale_dtype is not None:
        shapes["key_scale"] = (scale_dtype, (bs, heads))
        if "value" in shapes:
            shapes["value_scale"] = (scale_dtype, (bs, heads))
    starts, total = {}, 0
    for name, (elem, shape) in shapes.items():
        starts[name] = total
        total += _round_up(layers * nb * block_bytes(elem, shape), align)

    raw = _allocate(total + align, torch.device(device), common.bool_argument("pin_memory", pin_memory))
    shift = (-raw.data_ptr()) % align
    buffer = raw[shift:shift + total]
    views: dict[str, list[torch.Tensor]] = {name: [] for name in ("key", "value", "key_scale", "value_scale")}
    segments = []
    for name, (elem, shape) in shapes.items():
        block = block_bytes(elem, shape)
        for layer in range(layers):
            offset = starts[name] + layer * nb * block
            views[name].append(buffer[offset:offset + nb * block].view(elem).view(nb, *shape))
        segments.append(Segment(name, str(elem).removeprefix("torch."), tuple(shape), block,
                                tuple(v.data_ptr() for v in views[name])))
    descriptor = CacheDescriptor(layout, str(dtype).removeprefix("torch."), layers, nb, bs, heads, d, first,
                                 model_heads, rank, sizes["tp_size"], str(buffer.device), tuple(segments),
                                 ((buffer.data_ptr(), total),))
    return TransferCaches(views["key"], views["value"], views["key_scale"], views["value_scale"], buffer, descriptor)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _allocate(nbytes: int, device: torch.device, pin_memory: bool) -> torch.Tensor:
    """``nbytes`` of uninitialised memory on ``device`` (page-locked host memory with ``pin_memory``)."""
    if pin_memory and device.type != "cpu":
        raise ValueError(f"pin_memory=True is for host caches, got device {device}")
    try:
        return torch.empty(nbytes, dtype=torch.uint8, device=device, pin_memory=pin_memory)
    except RuntimeError as error:
        if pin_memory:
            raise ValueError(f"pin_memory=True needs an accelerator runtime (e.g. torch_npu), which this torch "
                             f"lacks: {error}") from None
        raise
