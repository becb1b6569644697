"""The dtype table: which dtypes each tensor may have, and the NZ element count per dtype.

Every rule about dtypes lives here, so the checks, the layout helpers, the reference and
every backend read the same numbers.
"""

from __future__ import annotations

import torch

#: dtypes a cache, ``new_kv`` and the outputs may have (a 1- or 2-byte copy for every backend).
CACHE_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.int8)

#: dtypes the index tensors (offsets, lengths, block table) may have.
INDEX_DTYPES: tuple[torch.dtype, ...] = (torch.int32, torch.int64)

#: Bytes in one hardware data block: every copied row must be a whole number of them.
BLOCK_BYTES = 32

#: Largest NZ token row, in bytes: ``128 * 576`` float16 elements, the limit Huawei documents.
NZ_MAX_ROW_BYTES = 128 * 576 * 2

#: ``reshape_and_cache`` in NZ: each head of K and V must be below this many bytes.
NZ_MAX_HEAD_BYTES = 98304

#: dtypes of ``reshape_and_cache``'s value and value cache in NZ (ATB has no int8 values there).
NZ_VALUE_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16)

#: ``block_size`` of an NZ cache must be a multiple of this.
NZ_BLOCK_SIZE_MULTIPLE = 16

#: Value-cache dtypes allowed with an int8 key cache in NZ, besides int8 itself.
NZ_INT8_KEY_VALUE_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16)


def nz_elements(dtype: torch.dtype) -> int:
    """Elements in one 32-byte NZ fractal row ``E``: 16 for 2-byte dtypes, 32 for int8."""
    return BLOCK_BYTES // dtype.itemsize


def nz_dtype_pair_allowed(key_dtype: torch.dtype, value_dtype: torch.dtype) -> bool:
    """Whether an NZ cache may pair these dtypes: equal, or int8 keys with 16-bit values."""
    if key_dtype == value_dtype:
        return True
    return key_dtype == torch.int8 and value_dtype in NZ_INT8_KEY_VALUE_DTYPES


def dtype_names(dtypes: tuple[torch.dtype, ...]) -> str:
    """``"float16, bfloat16 or int8"``: a dtype list for error messages."""
    names = [str(d).removeprefix("torch.") for d in dtypes]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
