"""What another process needs to know of a process's KV caches to move their blocks: the
descriptor of :func:`~ascend_kv.transfer.allocate_transfer_caches`, serialisable as JSON
(docs/semantics.md §17.1).

Text that is not a descriptor is a ``ValueError`` whatever is wrong in it (a wrong JSON type too,
as ``json.loads`` raises).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace

import torch

#: The block layouts a transfer-ready cache takes (gather_blocks' names).
LAYOUTS = ("nd", "hnd", "nz")
#: The segments of a transfer-ready allocation, in their order in it.
SEGMENTS = ("key", "value", "key_scale", "value_scale")


def block_bytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    """Bytes of one block of ``shape`` elements of ``dtype``."""
    count = dtype.itemsize
    for size in shape:
        count *= size
    return count


@dataclass(frozen=True)
class Segment:
    """One kind of cache of every layer (K, V, or a scale cache), block-indexed.

    Attributes
    ----------
    name : str
        ``"key"``, ``"value"``, ``"key_scale"`` or ``"value_scale"``.
    dtype : str
        torch's name of its element type (``"float16"``).
    block_shape : tuple of int
        One block: ``(bs, H, D)`` (nd), ``(H, bs, D)`` (hnd), ``(H*D // E, bs, E)`` (nz); a scale
        cache's ``(bs, H)``.
    block_stride : int
        Bytes from one block to the next.
    bases : tuple of int
        Per layer, the address of block 0.
    """

    name: str
    dtype: str
    block_shape: tuple[int, ...]
    block_stride: int
    bases: tuple[int, ...]

    @property
    def block_bytes(self) -> int:
        """Bytes of one block: ``prod(block_shape) * itemsize``."""
        return block_bytes(getattr(torch, self.dtype), self.block_shape)


@dataclass(frozen=True)
class CacheDescriptor:
    """A process's transfer-ready KV caches as a peer sees them.

    Attributes
    ----------
    layout : str
        The data caches' block layout: ``"nd"``, ``"hnd"`` or ``"nz"``.
    dtype : str
        The data caches' element type.
    num_layers, num_blocks, block_size : int
        Layers, blocks per cache, tokens per block.
    num_heads : int
        KV heads held here (this TP rank's).
    head_size : int
        Elements per head.
    head_start : int
        The first of this rank's heads among the model's ``total_heads``.
    total_heads : int
        The model's KV heads.
    tp_rank, tp_size : int
        This process's tensor-parallel rank and size.
    device : str
        Where the caches live (``"cpu"``, ``"npu:0"``).
    segments : tuple of Segment
        ``key`` and (unless key-only) ``value``, then the scale caches if any.
    regions : tuple of (int, int)
        ``(address, bytes)`` of each allocation, aligned: what a transfer engine registers.
    session : str
        The transfer engine's session id (``"host:port"``) once an agent serves these caches, else "".
    """

    layout: str
    dtype: str
    num_layers: int
    num_blocks: int
    block_size: int
    num_heads: int
    head_size: int
    head_start: int
    total_heads: int
    tp_rank: int
    tp_size: int
    device: str
    segments: tuple[Segment, ...]
    regions: tuple[tuple[int, int], ...]
    session: str = field(default="")

    def segment(self, name: str) -> Segment | None:
        """The segment called ``name``, or None."""
        return next((s for s in self.segments if s.name == name), None)

    def with_session(self, session: str) -> CacheDescriptor:
        """This descriptor, served by the transfer engine session ``session``."""
        return replace(self, session=session)

    def to_json(self) -> str:
        """The descriptor as JSON text (:meth:`from_json` reads it back)."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> CacheDescriptor:
        """A descriptor from :meth:`to_json`'s text, checked.

        Raises
        ------
        ValueError
            Text that is not such a descriptor, naming the field and what it holds.
        """
        try:
            data = json.loads(text)
        except ValueError as error:
            raise ValueError(f"descriptor is not JSON: {error}") from None
        if not isinstance(data, dict):
            raise ValueError(f"descriptor must be a JSON object, got {type(data).__name__}")
        names = {f for f in cls.__dataclass_fields__}
        if set(data) != names:
            missing, extra = sorted(names - set(data)), sorted(set(data) - names)
            raise ValueError(f"descriptor fields differ: missing {missing}, unknown {extra}")
        segments = data.pop("segments")
        if not isinstance(segments, list):
            raise ValueError(f"descriptor.segments must be a list, got {segments!r:.80}")
        try:
            parsed = [Segment(s["name"], s["dtype"], tuple(s["block_shape"]), s["block_stride"], tuple(s["bases"]))
                      for s in segments]
            regions = tuple((int(a), int(b)) for a, b in data.pop("regions"))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"descriptor segments or regions are malformed: {error!r}") from None
        descriptor = cls(segments=tuple(parsed), regions=regions, **data)
        validate(descriptor)
        return descriptor


def validate(d: CacheDescriptor) -> None:
    """``ValueError`` naming the first field of ``d`` that no transfer-ready allocation has."""
    for name in ("num_layers", "num_blocks", "block_size", "num_heads", "head_size", "head_start", "total_heads",
                 "tp_rank", "tp_size"):
        value, zero = getattr(d, name), name in ("head_start", "tp_rank", "num_blocks")
        if type(value) is not int or value < (0 if zero else 1):
            raise ValueError(f"descriptor.{name} must be a {'non-negative' if zero else 'positive'} int, got {value!r}")
    if d.layout not in LAYOUTS:
        raise ValueError(f"descriptor.layout must be one of {LAYOUTS}, got {d.layout!r}")
    if not isinstance(getattr(torch, str(d.dtype), None), torch.dtype):
        raise ValueError(f"descriptor.dtype must name a torch dtype, got {d.dtype!r}")
    if d.head_start + d.num_heads > d.total_heads or d.tp_rank >= d.tp_size:
        raise ValueError(f"descriptor heads [{d.head_start}, {d.head_start + d.num_heads}) must lie in the model's "
                         f"{d.total_heads} and tp_rank {d.tp_rank} below tp_size {d.tp_size}")
    names = [s.name for s in d.segments]
    if names[:1] != ["key"] or len(set(names)) != len(names) or not set(names) <= set(SEGMENTS):
        raise ValueError(f"descriptor.segments must start with 'key' and name each of {SEGMENTS} once at most, "
                         f"got {names}")
    for s in d.segments:
        if not isinstance(getattr(torch, str(s.dtype), None), torch.dtype):
            raise ValueError(f"descriptor segment {s.name!r} dtype must name a torch dtype, got {s.dtype!r}")
        if len(s.bases) != d.num_layers or not all(type(b) is int and b > 0 for b in s.bases):
            raise ValueError(f"descriptor segment {s.name!r} must hold one address per layer ({d.num_layers}), "
                             f"got {list(s.bases)[:4]}")
        if type(s.block_stride) is not int or s.block_stride < s.block_bytes:
            raise ValueError(f"descriptor segment {s.name!r} block_stride {s.block_stride!r} is below its block's "
                             f"{s.block_bytes} bytes")
