"""Which tensors may share memory: the aliasing rules of every operation.

A written tensor must share no byte with a tensor the call reads while writing, nor with the
call's other written tensors. The test is on address ranges, and, where ranges meet, on
interleaved windows (two views that split one buffer's rows or columns share no byte).
"""

from __future__ import annotations

import torch

#: ``written_ranges_meet(written, written_extents, others, other_extents) -> bool``: whether the
#: address range of a written tensor (``data_ptr()`` plus its :func:`extent`) meets another written
#: one's or one of ``others``' (tuples, None entries skipped): only then do the full rules run.
#: Compiled at install (``_ranges.c``), as it runs on every call.
from ._ranges import written_ranges_meet  # noqa: F401


def memory_span(tensor: torch.Tensor) -> tuple[int, int]:
    """``[first, last)`` byte addresses a non-empty tensor may touch (strides are never negative)."""
    if tensor.is_contiguous():  # the usual case, without a pass over the strides
        return tensor.data_ptr(), tensor.data_ptr() + tensor.nbytes
    last_element = sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride()))
    return tensor.data_ptr(), tensor.data_ptr() + (last_element + 1) * tensor.element_size()


def _window(tensor: torch.Tensor, period: int) -> tuple[int, int] | None:
    """``(first, length)``: every byte of ``tensor`` lies, modulo ``period``, in the ``length`` bytes
    from ``first`` (wrapping); None when that window would not fit in one period.

    Dimensions whose byte strides are multiples of ``period`` move whole periods; the others
    (e.g. the columns of a column slice) make the window.
    """
    size = tensor.element_size()
    length = size
    for n, stride in zip(tensor.shape, tensor.stride()):
        if n > 1 and (stride * size) % period:
            length += (n - 1) * stride * size
    return (tensor.data_ptr() % period, length) if length <= period else None


def _interleaved_apart(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` provably share no byte because, for some period (a byte stride of
    either), each one's bytes fall in a window of every period that the other's window misses:
    ``buf[..., :k]`` and ``buf[..., k:]`` of one ``[n, bs, h, k + v]`` buffer (MLA), or
    ``buf[:, 0]`` and ``buf[:, 1]`` of one ``[n, 2, ...]`` buffer (K and V block by block)."""
    size_a, size_b = a.element_size(), b.element_size()
    periods = {s * size_a for n, s in zip(a.shape, a.stride()) if n > 1 and s > 0}
    periods |= {s * size_b for n, s in zip(b.shape, b.stride()) if n > 1 and s > 0}
    for period in sorted(periods):
        a_window, b_window = _window(a, period), _window(b, period)
        if a_window is not None and b_window is not None:
            (a_at, a_len), (b_at, b_len) = a_window, b_window
            if (b_at - a_at) % period >= a_len and (a_at - b_at) % period >= b_len:
                return True
    return False


def may_share_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two non-empty tensors on one device may share a byte: their address ranges meet, and
    they are not interleaved apart. Rarer views that share no byte may still answer True."""
    a_first, a_end = memory_span(a)
    b_first, b_end = memory_span(b)
    return a_first < b_end and b_first < a_end and not _interleaved_apart(a, b)


def require_apart(name: str, out: torch.Tensor, inputs: dict[str, torch.Tensor]) -> None:
    """``ValueError`` when output ``out`` may share memory with a tensor the call reads while writing.

    The test is on address ranges and interleaved windows (:func:`may_share_memory`), so it may
    also reject rarer views that share no element; what would run instead is a read of
    half-written data.
    """
    if out.numel() == 0:
        return
    for input_name, tensor in inputs.items():
        if tensor.numel() == 0 or tensor.device != out.device:  # addresses of two devices never meet
            continue
        if may_share_memory(out, tensor):
            raise ValueError(
                f"{name} shares memory with {input_name}, which the operation reads while it writes {name}: "
                f"pass tensors in separate memory (e.g. {input_name}.clone())"
            )


def require_separate_outputs(first_name: str, first: torch.Tensor, name: str, out: torch.Tensor) -> None:
    """``ValueError`` when two outputs may share memory: which of the two writes lands would be undefined."""
    if first.numel() and out.numel() and first.device == out.device and may_share_memory(first, out):
        raise ValueError(
            f"{name} shares memory with {first_name}, and the operation writes both (the NPU kernels in "
            f"parallel), so which write lands would be undefined: pass separate tensors"
        )



def extents(*tensors: object) -> tuple[int, ...]:
    """:func:`extent` of each tensor, 0 for an absent one (None): the form :func:`written_ranges_meet` takes."""
    return tuple(extent(t) if isinstance(t, torch.Tensor) else 0 for t in tensors)


def extent(tensor: torch.Tensor) -> int:
    """Bytes from ``tensor``'s first address to one past its last (0 when empty): a function of its
    sizes and strides only, so a call's structure check can keep it."""
    if tensor.numel() == 0:
        return 0
    first, end = memory_span(tensor)
    return end - first
