"""Prefill-to-decode KV movement on Mooncake's TransferEngine (docs/semantics.md §17.3): an agent
registers its transfer-ready caches once, and pulls or pushes a request's blocks by the address
lists of :func:`~ascend_kv.transfer.block_address_lists`. Caches of another layout or head range
than the peer's are filled through a registered staging buffer and one ``scatter_blocks``.

Mooncake is the optional extra ``ascend_kv[mooncake]``: importing this module never needs it.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import time
from typing import Any

import torch

from ..api.arguments import nz_elements
from ..api.transfer_ops import scatter_blocks
from .addresses import GEOMETRY, block_address_lists
from .caches import TransferCaches, allocate_transfer_caches
from .descriptor import CacheDescriptor

#: Ranges per batch call: Mooncake's TCP transport refuses a batch of 4,096 (its lane queue is full).
MAX_BATCH = 1024
INSTALL_HINT = ("Mooncake's transfer engine is not installed: pip install ascend_kv[mooncake] (the wheel "
                "mooncake-transfer-engine-non-cuda; on Ascend, mooncake-transfer-engine-npu), and on Debian or "
                "Ubuntu the library it loads, libibverbs1 (scripts/system_packages.sh)")


def transfer_engine() -> Any:
    """A new ``mooncake.engine.TransferEngine``, or ``ImportError`` saying how to install it."""
    try:
        engine = importlib.import_module("mooncake.engine")
    except ImportError as error:
        raise ImportError(f"{INSTALL_HINT} ({error})") from error
    return engine.TransferEngine()


class TransferError(RuntimeError):
    """A transfer that failed or did not finish in time; the caches are as :meth:`TransferAgent.pull` says."""


class TransferAgent:
    """One process's end of KV transfers: its caches registered once with a Mooncake TransferEngine.

    Parameters
    ----------
    caches : TransferCaches
        From :func:`~ascend_kv.transfer.allocate_transfer_caches`; registered region by region.
    host : str
        This machine's address the peer reaches (``"127.0.0.1"`` on one machine).
    protocol : str
        Mooncake's transport: ``"tcp"``, ``"rdma"``, or ``"ascend"`` with mooncake-transfer-engine-npu.
    device_name : str
        The transport's device (``""`` for TCP).
    metadata_server : str
        ``"P2PHANDSHAKE"`` (no metadata server: the session id is ``host:port``) or a server's address.
    timeout : float
        Seconds a transfer may take before it is a :class:`TransferError`.

    Attributes
    ----------
    descriptor : CacheDescriptor
        The caches' descriptor with this agent's session: what the peer is sent (``to_json()``).

    Examples
    --------
    >>> caches = ascend_kv.transfer.allocate_transfer_caches(2, 64, 16, 8, 128)   # doctest: +SKIP
    >>> agent = ascend_kv.transfer.TransferAgent(caches)                           # doctest: +SKIP
    >>> agent.pull(CacheDescriptor.from_json(peer_json), remote_ids, local_ids)    # doctest: +SKIP
    """

    def __init__(self, caches: TransferCaches, *, host: str = "127.0.0.1", protocol: str = "tcp",
                 device_name: str = "", metadata_server: str = "P2PHANDSHAKE", timeout: float = 30.0) -> None:
        if not isinstance(caches, TransferCaches):
            raise TypeError(f"caches must be TransferCaches (allocate_transfer_caches), got {type(caches).__name__}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        self.caches, self.timeout = caches, float(timeout)
        self._engine = transfer_engine()
        if self._engine.initialize(host, metadata_server, protocol, device_name) != 0:
            raise TransferError(f"Mooncake's TransferEngine did not initialize on {host!r} over {protocol!r}")
        self.descriptor = caches.descriptor.with_session(f"{host}:{self._engine.get_rpc_port()}")
        self._registered: list[int] = []
        for address, size in caches.descriptor.regions:
            self._register(address, size)
        self._staging: TransferCaches | None = None
        self._retired: list[TransferCaches] = []  # staging a timed-out transfer may still write: kept, registered
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ascend_kv-transfer")

    @property
    def regions(self) -> int:
        """Memory regions this agent has registered (HCCL allows 256 per process)."""
        return len(self._registered)

    def pull(self, remote: CacheDescriptor, remote_block_ids: torch.Tensor, local_block_ids: torch.Tensor) -> None:
        """Read blocks ``remote_block_ids`` of the peer's caches into blocks ``local_block_ids`` of these.

        With the peer's geometry (layout, dtype, heads) the bytes land in place: one
        ``batch_transfer_sync_read`` of the merged ranges; a failure may leave the destination
        blocks partly written, never any other block. Otherwise (another layout, or this rank's
        heads a part of the peer's: TP 1 -> N) they land in a registered staging buffer of the
        peer's geometry, and only once every byte arrived one ``scatter_blocks`` per segment
        relays them out here; a failure leaves the caches as they were. Different block sizes
        are not supported.

        Parameters
        ----------
        remote : CacheDescriptor
            The peer agent's :attr:`descriptor`.
        remote_block_ids, local_block_ids : torch.Tensor
            ``[n]`` int32/int64 host ids: the peer's blocks, and the distinct blocks here they go to.

        Raises
        ------
        ValueError
            Geometry that no relayout joins, an id out of range, a repeated destination (nothing moves).
        TransferError
            The engine failed, or did not finish within ``timeout`` (a peer gone).
        """
        if not isinstance(remote, CacheDescriptor):
            raise TypeError(f"remote must be a CacheDescriptor, got {type(remote).__name__}")
        local = self.caches.descriptor
        if all(getattr(remote, f) == getattr(local, f) for f in GEOMETRY):
            ranges = block_address_lists(remote, self.descriptor, remote_block_ids, local_block_ids)
            self._run(remote.session, "read", ranges)
            return
        heads = _head_slice(remote, local)
        # The local ids' rules (in range, distinct) before any byte moves: those scatter_blocks applies after.
        block_address_lists(local, local, local_block_ids, local_block_ids)
        count = len(local_block_ids)
        staging = self._staging_for(remote, count)
        ranges = block_address_lists(remote, staging.descriptor, remote_block_ids, torch.arange(count))
        self._run(remote.session, "read", ranges)
        for name in [s.name for s in local.segments]:
            scale = name.endswith("_scale")  # an ND-indexed [bs, H] block: one element per head
            _scatter_segment(staging.caches(name), self.caches.caches(name), count, heads, local_block_ids,
                             "nd" if scale else remote.layout, "nd" if scale else local.layout,
                             1 if scale else remote.head_size)

    def push(self, remote: CacheDescriptor, local_block_ids: torch.Tensor, remote_block_ids: torch.Tensor) -> None:
        """Write blocks ``local_block_ids`` of these caches into blocks ``remote_block_ids`` of the peer's.

        The peer's geometry must be these caches' (a push does not relayout: the peer pulls for
        that); one ``batch_transfer_sync_write``. Raises as :meth:`pull`.
        """
        if not isinstance(remote, CacheDescriptor):
            raise TypeError(f"remote must be a CacheDescriptor, got {type(remote).__name__}")
        self._run(remote.session, "write", block_address_lists(self.descriptor, remote, local_block_ids,
                                                               remote_block_ids))

    def close(self) -> None:
        """Unregister the memory and stop the engine's use; the caches stay valid."""
        for address in self._registered:
            self._engine.unregister_memory(address)
        self._registered.clear()
        self._worker.shutdown(wait=False)

    def _register(self, address: int, size: int) -> None:
        if self._engine.register_memory(address, size) != 0:
            raise TransferError(f"Mooncake did not register {size} bytes at {address:#x}")
        self._registered.append(address)

    def _staging_for(self, remote: CacheDescriptor, blocks: int) -> TransferCaches:
        """A registered buffer of ``blocks`` blocks in the peer's geometry (kept and reused while large enough)."""
        staging = self._staging
        if staging is None or staging.descriptor.num_blocks < blocks or any(
                getattr(staging.descriptor, f) != getattr(remote, f) for f in GEOMETRY):
            scales = remote.segment("key_scale")
            staging = allocate_transfer_caches(
                remote.num_layers, max(blocks, 1), remote.block_size, remote.num_heads, remote.head_size,
                getattr(torch, remote.dtype), layout=remote.layout, key_only=remote.segment("value") is None,
                scale_dtype=None if scales is None else getattr(torch, scales.dtype),
                device=self.caches.buffer.device, tp_size=remote.tp_size, tp_rank=remote.tp_rank,
                head_start=remote.head_start, total_heads=remote.total_heads)
            self._register(*staging.descriptor.regions[0])
            if self._staging is not None:
                self._retired.append(self._staging)
            self._staging = staging
        return staging

    def _run(self, session: str, direction: str, ranges: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
        """The ranges in batches of at most MAX_BATCH, all within the timeout."""
        src, dst, lengths = (t.tolist() for t in ranges)
        if direction == "read":  # Mooncake's order: local buffers, then the peer's addresses
            call, local, peer = self._engine.batch_transfer_sync_read, dst, src
        else:
            call, local, peer = self._engine.batch_transfer_sync_write, src, dst
        deadline = time.monotonic() + self.timeout
        for start in range(0, len(lengths), MAX_BATCH):
            part = slice(start, start + MAX_BATCH)
            future = self._worker.submit(call, session, local[part], peer[part], lengths[part])
            try:
                status = future.result(timeout=max(deadline - time.monotonic(), 0.0))
            except concurrent.futures.TimeoutError:
                # The worker stays blocked in the engine: a new one serves the next transfer.
                self._worker.shutdown(wait=False)
                self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ascend_kv-transfer")
                if self._staging is not None:
                    self._retired.append(self._staging)
                    self._staging = None
                raise TransferError(f"the {direction} of {sum(lengths)} bytes from {session} did not finish within "
                                    f"{self.timeout} s (is the peer alive?)") from None
            if status != 0:
                raise TransferError(f"Mooncake's batch_transfer_sync_{direction} of {len(lengths[part])} ranges "
                                    f"({sum(lengths[part])} bytes) with {session} failed (status {status})")


def _head_slice(remote: CacheDescriptor, local: CacheDescriptor) -> slice:
    """The peer's heads this side holds, or ``ValueError`` for geometry no relayout joins."""
    for field in ("num_layers", "block_size", "head_size"):
        if getattr(remote, field) != getattr(local, field):
            raise ValueError(f"remote.{field} = {getattr(remote, field)} differs from this side's "
                             f"{getattr(local, field)}: no relayout changes it")
    if remote.dtype != local.dtype or [s.name for s in remote.segments] != [s.name for s in local.segments]:
        raise ValueError(f"remote holds {remote.dtype} caches {[s.name for s in remote.segments]}, this side "
                         f"{local.dtype} {[s.name for s in local.segments]}")
    start = local.head_start - remote.head_start
    if start < 0 or start + local.num_heads > remote.num_heads:
        raise ValueError(f"this side's heads [{local.head_start}, {local.head_start + local.num_heads}) are not "
                         f"among the peer's [{remote.head_start}, {remote.head_start + remote.num_heads})")
    pieces = nz_elements(getattr(torch, remote.dtype))
    if remote.layout == "nz" and local.num_heads != remote.num_heads and remote.head_size % pieces:
        raise ValueError(f"a part of an NZ block's heads needs head_size ({remote.head_size}) a multiple of "
                         f"{pieces} (an NZ piece)")
    return slice(start, start + local.num_heads)


def _scatter_segment(staged: list[torch.Tensor], caches: list[torch.Tensor], count: int, heads: slice,
                     block_ids: torch.Tensor, src_layout: str, cache_layout: str, head_size: int) -> None:
    """One segment's staged blocks, this side's heads of them, into its caches (one scatter_blocks)."""
    if not caches:
        return
    # The segment's layers are back to back in the staging buffer: one [1, L, n, *block] view of them.
    first = staged[0]
    blocks = first.as_strided((1, len(staged), count, *first.shape[1:]), (0, first.numel(), *first.stride()))
    if blocks.dim() == 5:  # a scale cache [.., bs, H]: one element per head
        blocks, caches = blocks.unsqueeze(-1), [c.unsqueeze(-1) for c in caches]
    if src_layout == "nd":
        blocks = blocks[:, :, :, :, heads]
    elif src_layout == "hnd":
        blocks = blocks[:, :, :, heads]
    else:  # nz: [H * D // E, bs, E]; a head is D // E pieces (_head_slice checked they are whole)
        pieces = head_size // blocks.shape[-1]
        blocks = blocks[:, :, :, heads.start * pieces:heads.stop * pieces]
    scatter_blocks(blocks, caches, [], block_ids, src_layout=src_layout, cache_layout=cache_layout)
