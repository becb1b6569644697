"""The public operations on hybrid models' state caches (docs/semantics.md §14): ``copy_state_slots``
(prefix caching and forks copy whole state slots), ``gather_state_slots`` and ``scatter_state_slots``
(state slots to or from one byte buffer: offload, KV transfer). Each normalises its arguments and
calls its operator once (``torch.ops.ascend_kv``, C++): every state of every layer in one call.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .block_ops import _flag, _tensor_list, _tensors


def copy_state_slots(
    states: Sequence[torch.Tensor],
    src_indices: torch.Tensor,
    dst_indices: torch.Tensor,
    *,
    simultaneous: bool = False,
) -> None:
    """Copy slot ``src_indices[i]`` to slot ``dst_indices[i]`` of every state, in place, without a
    state-sized temporary (SGLang's ``copy_mamba_slots``, vLLM's mamba state copies).

    Parameters
    ----------
    states : sequence of torch.Tensor
        State caches ``[num_slots, ...]``, e.g. every layer's convolution and SSM states: each its
        own inner shape, strides and element type (1, 2, 4 or 8 bytes), all on one device with one
        ``num_slots``. Views into padded pages and per-layer views of one buffer are copied in
        place; a view listed twice (same ``data_ptr()``, dtype, shape and strides) is copied once.
    src_indices, dst_indices : torch.Tensor
        ``[n]`` int32 or int64 slots, one pair per entry; a negative entry makes its pair padding.
        On the host they are checked (in range; destinations distinct; unless ``simultaneous``,
        no slot both a source and a destination); on the states' device an out-of-range pair is
        skipped and nothing is read back.
    simultaneous : bool, optional
        True: every source slot is read before any destination is written, so swaps, chains and
        self-copies are defined (only the overwritten source slots are staged).

    Raises
    ------
    TypeError, ValueError
        A wrong type, dtype, shape or index value, naming it. Nothing is written.

    Examples
    --------
    >>> conv = torch.arange(4 * 3, dtype=torch.bfloat16).reshape(4, 3)
    >>> ssm = torch.zeros(4, 2, 2)
    >>> ascend_kv.copy_state_slots([conv, ssm], torch.tensor([0, -1]), torch.tensor([2, -1]))
    >>> conv[2].tolist()
    [0.0, 1.0, 2.0]
    """
    listed = _tensor_list("states", states)
    _tensors(src_indices=src_indices, dst_indices=dst_indices)
    torch.ops.ascend_kv.copy_state_slots(listed, src_indices, dst_indices, _flag(simultaneous))


def state_slot_bytes(states: Sequence[torch.Tensor]) -> int:
    """Bytes of one slot of every state: the width of a :func:`gather_state_slots` buffer row.

    Examples
    --------
    >>> ascend_kv.state_slot_bytes([torch.zeros(8, 3, 4, dtype=torch.bfloat16), torch.zeros(8, 2)])
    32
    """
    return sum(state.shape[1:].numel() * state.element_size() for state in _tensor_list("states", states))


def gather_state_slots(states: Sequence[torch.Tensor], slot_ids: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Copy slots ``slot_ids`` of every state into the rows of one byte buffer, each slot's bytes as they are.

    Row ``j`` of ``out`` holds slot ``slot_ids[j]`` of ``states[0]``, then of ``states[1]``, ...,
    each as its dense bytes (C order of ``state.shape[1:]``): one operator call and, on an NPU, one
    kernel launch for every state of every layer.

    Parameters
    ----------
    states : sequence of torch.Tensor
        As :func:`copy_state_slots`'s (read; a view may be listed twice).
    slot_ids : torch.Tensor
        ``[n]`` int32 or int64: on the host checked (in range, repeats allowed), on the states'
        device never read back; negative or out-of-range entries leave their row as it is.
    out : torch.Tensor
        ``[n, state_slot_bytes(states)]`` uint8, each row's bytes contiguous (any row stride), on
        the states' device or on the host (pinned memory: non-blocking); apart from the states.

    Returns
    -------
    torch.Tensor
        ``out``.

    Raises
    ------
    TypeError, ValueError
        A wrong type, dtype, shape or index value. Nothing is written.

    Examples
    --------
    >>> states = [torch.ones(4, 3, dtype=torch.bfloat16), torch.zeros(4, 2)]
    >>> out = torch.empty(1, ascend_kv.state_slot_bytes(states), dtype=torch.uint8)
    >>> ascend_kv.gather_state_slots(states, torch.tensor([3]), out).shape
    torch.Size([1, 14])
    """
    listed = _tensor_list("states", states)
    _tensors(slot_ids=slot_ids, out=out)
    torch.ops.ascend_kv.gather_state_slots(listed, slot_ids, out)
    return out


def scatter_state_slots(src: torch.Tensor, states: Sequence[torch.Tensor], slot_ids: torch.Tensor) -> None:
    """Copy the rows of one byte buffer into slots ``slot_ids`` of every state: the inverse of
    :func:`gather_state_slots`.

    Parameters
    ----------
    src : torch.Tensor
        ``[n, state_slot_bytes(states)]`` uint8 as :func:`gather_state_slots` writes it, on the
        states' device or on the host.
    states : sequence of torch.Tensor
        As :func:`copy_state_slots`'s; written, apart from each other and from ``src``.
    slot_ids : torch.Tensor
        ``[n]`` int32 or int64: on the host checked (in range, the non-negative ones distinct); a
        negative or (device ids) out-of-range entry writes nothing.

    Raises
    ------
    TypeError, ValueError
        As :func:`gather_state_slots`; a repeated host id too. Nothing is written.

    Examples
    --------
    >>> states = [torch.zeros(4, 3, dtype=torch.bfloat16), torch.zeros(4, 2)]
    >>> ascend_kv.scatter_state_slots(torch.zeros(2, 14, dtype=torch.uint8), states, torch.tensor([1, -1]))
    """
    listed = _tensor_list("states", states)
    _tensors(src=src, slot_ids=slot_ids)
    torch.ops.ascend_kv.scatter_state_slots(src, listed, slot_ids)
