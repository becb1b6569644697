"""The dtype table: which dtypes each tensor may have, and the NZ element count per dtype.

Every rule about dtypes lives here, so the checks, the layout helpers, the reference and
every backend read the same numbers.
"""

from __future__ import annotations

import torch

#: dtypes a cache, ``new_kv``, ``key``/``value`` and the outputs may have: every operation only moves
#: bytes, so every 1-, 2- or 4-byte type serving code stores in a cache (fp8 and int8 KV
#: quantisation, fp32 CPU models); bool, complex and 8-byte types are refused.
CACHE_DTYPES: tuple[torch.dtype, ...] = (
    torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16, torch.int32, torch.float32,
    torch.float8_e4m3fn, torch.float8_e5m2,
)

#: The cache dtypes Huawei's ATB documents for these operations (ascend_kv accepts :data:`CACHE_DTYPES`).
ATB_CACHE_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.int8)

#: dtypes the index tensors (offsets, lengths, block table) may have.
INDEX_DTYPES: tuple[torch.dtype, ...] = (torch.int32, torch.int64)

#: Bytes in one hardware data block: every copied row must be a whole number of them.
BLOCK_BYTES = 32

#: Largest NZ token row, in bytes: ``128 * 576`` float16 elements, the limit Huawei documents.
NZ_MAX_ROW_BYTES = 128 * 576 * 2

#: ``reshape_and_cache`` in NZ: each head of K and V must be below this many bytes.
NZ_MAX_HEAD_BYTES = 98304

#: ``block_size`` of an NZ cache must be a multiple of this.
NZ_BLOCK_SIZE_MULTIPLE = 16

def nz_elements(dtype: torch.dtype) -> int:
    """Elements in one 32-byte NZ fractal row ``E``: 32 for 1-byte, 16 for 2-byte, 8 for 4-byte dtypes."""
    return BLOCK_BYTES // dtype.itemsize


def element_types_note() -> str:
    """Which element types the operations take, and where that goes beyond Huawei's lists (``explain``, ``info``)."""
    def listed(dtypes: tuple[torch.dtype, ...]) -> str:
        return ", ".join(str(d).removeprefix("torch.") for d in dtypes)

    beyond = tuple(d for d in CACHE_DTYPES if d not in ATB_CACHE_DTYPES)
    return (f"every 1-, 2- or 4-byte element type ({listed(CACHE_DTYPES)}; the operations move bytes, NZ's "
            f"E = 32 // itemsize); Huawei's ATB documents {listed(ATB_CACHE_DTYPES)}, so {listed(beyond)} "
            f"go beyond its lists")


def dtype_names(dtypes: tuple[torch.dtype, ...]) -> str:
    """``"float16, bfloat16 or int8"``: a dtype list for error messages."""
    names = [str(d).removeprefix("torch.") for d in dtypes]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
