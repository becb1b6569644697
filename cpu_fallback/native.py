"""The optional compiled run copier (``_rowcopy.c``) and when it may be used.

``pip install`` compiles ``_rowcopy.c`` with the system C compiler when there is one; without
it the import fails, :data:`AVAILABLE` is False and the fallback keeps its pure-torch paths.
The copier works on host memory through raw addresses and byte strides, so it takes only CPU
tensors whose copied items are contiguous and whose destination rows do not overlap.
"""

from __future__ import annotations

import numpy as np
import torch

try:
    from ._rowcopy import copy_runs as _copy_runs
except ImportError:  # no compiler at install time: the pure-torch paths run instead
    _copy_runs = None

#: Whether the compiled copier was built and imported.
AVAILABLE: bool = _copy_runs is not None


def usable(src: torch.Tensor, dst: torch.Tensor) -> bool:
    """Whether the copier may read ``src`` and write ``dst``: built, and both on the host."""
    return AVAILABLE and src.device.type == "cpu" and dst.device.type == "cpu"


def copy_runs(
    src: torch.Tensor,
    dst: torch.Tensor,
    src_offset: np.ndarray,
    dst_offset: np.ndarray,
    items: np.ndarray,
    item_bytes: int,
    steps: tuple[int, int],
    pieces: int = 1,
    piece_steps: tuple[int, int] = (0, 0),
) -> None:
    """Copy runs of ``items[r]`` items of ``item_bytes`` from ``src`` into ``dst``.

    Item ``i`` of piece ``p`` of run ``r`` is read at byte ``src_offset[r] + p * piece_steps[0]
    + i * steps[0]`` of ``src`` and written at ``dst_offset[r] + p * piece_steps[1] + i *
    steps[1]`` of ``dst``. Offsets and steps are in bytes from the tensors' first element;
    the caller guarantees that they stay inside the tensors.

    Parameters
    ----------
    src, dst : torch.Tensor
        Host tensors; ``dst`` is written in place.
    src_offset, dst_offset, items : numpy.ndarray
        ``[runs]`` int64.
    item_bytes : int
        Bytes in one item (a row, or one 32-byte NZ fractal row).
    steps : tuple of int
        Byte step between consecutive items in ``src`` and in ``dst``.
    pieces : int, optional
        Pieces per item position (NZ: fractals per token row).
    piece_steps : tuple of int, optional
        Byte step between consecutive pieces in ``src`` and in ``dst``.
    """
    _copy_runs(
        src.data_ptr(), dst.data_ptr(), _int64(src_offset), _int64(dst_offset), _int64(items),
        item_bytes, steps[0], steps[1], pieces, piece_steps[0], piece_steps[1],
    )


def _int64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)
