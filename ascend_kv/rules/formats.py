"""The NPU's private storage formats: which tensors the operations may address through their strides."""

from __future__ import annotations

import torch

from ..dispatch import device as runtime
from .dtypes import NZ_BLOCK_SIZE_MULTIPLE, nz_elements


def require_base_formats(tensors: dict[str, torch.Tensor | None], nz_caches: tuple[str, ...] = ()) -> None:
    """``ValueError`` for an NPU tensor stored in a private format (e.g. FRACTAL_NZ by ``npu_format_cast``),
    whose bytes are not in its logical layout: the operations address tensors by their strides.

    The tensors named in ``nz_caches`` (the caches of an NZ call) may be FRACTAL_NZ when that
    storage holds their logical bytes (:func:`require_nz_storage_in_place`).
    """
    for name, tensor in tensors.items():
        code = None if tensor is None else runtime.storage_format(tensor)
        if code == runtime.FRACTAL_NZ and name in nz_caches:
            require_nz_storage_in_place(name, tensor)  # type: ignore[arg-type]
            continue
        if code is not None and code not in runtime.BASE_FORMATS:
            what = runtime.PRIVATE_FORMATS.get(code, f"format {code}")
            raise ValueError(
                f"{name} is stored in the NPU's private format {what}, whose bytes are not in the tensor's "
                f"logical layout: pass torch_npu.npu_format_cast({name}, 2) (ND) or a tensor made without a format cast"
            )


def require_nz_storage_in_place(name: str, cache: torch.Tensor) -> None:
    """``ValueError`` unless a FRACTAL_NZ cache's storage holds the bytes of its logical NZ shape.

    FRACTAL_NZ tiles a tensor's last two dims ``[M, N]`` into ``16 x C0`` fractals, stored
    ``[N / C0, M / 16, 16, C0]``, with ``C0`` 32 bytes of a 1- or 2-byte type. A cache shaped
    ``[num_blocks, T // E, block_size, E]`` (``E = C0``, ``block_size % 16 == 0``, contiguous,
    as torch_npu's tests cast it) is then stored exactly in that row-major order: one fractal
    column, whole fractals. Any other shape holds its bytes elsewhere than its strides say.
    """
    e = nz_elements(cache.dtype)
    shape = tuple(cache.shape)
    why = None
    if cache.element_size() not in (1, 2):
        why = (f"its dtype {str(cache.dtype).removeprefix('torch.')} has 4-byte elements, whose FRACTAL_NZ "
               f"fractal width ascend_kv does not know to be E = {e}")
    elif cache.dim() != 4 or shape[3] != e:
        why = (f"its logical shape {shape} is not [num_blocks, T // E, block_size, E = {e}] (a FRACTAL_NZ cache of "
               f"logical shape [num_blocks, block_size, T] holds the bytes of [num_blocks, T // E, block_size, E], "
               f"but addressed through its own strides: cast the cache in the NZ shape instead)")
    elif shape[2] % NZ_BLOCK_SIZE_MULTIPLE:
        why = f"block_size (shape[2]) = {shape[2]} is not a multiple of 16, so its fractals are padded"
    elif not cache.is_contiguous():
        why = "it is a strided view, whose storage fractals are not its rows"
    if why is not None:
        raise ValueError(
            f"{name} is stored in the NPU's private format FRACTAL_NZ, and its bytes are not where its shape "
            f"and strides say: {why}; pass torch_npu.npu_format_cast({name}, 2) (ND) or a cache made without a cast"
        )

