"""torch_npu's cache ops as documented, one token at a time: the goldens of the facade's tests.

Written from torch_npu's documentation (op-plugin ``docs/zh/custom_APIs/torch_npu/``) and the
goldens of its tests (op-plugin ``test/test_custom_ops/``), in plain loops over host copies;
every copy moves the integer view of the data, so each result is bit for bit (NaN payloads
of fp8 and fp32 included). docs/porting_from_torch_npu.md cites the sources.
"""

from __future__ import annotations

import torch
from cases import bits


def _ints(t: torch.Tensor) -> list[int]:
    return [int(v) for v in t.reshape(-1).tolist()]


def scatter(key: torch.Tensor, value: torch.Tensor | None, key_cache: torch.Tensor, value_cache: torch.Tensor | None,
            slots: torch.Tensor, nz: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``_npu_reshape_and_cache`` / ``npu_scatter_pa_kv_cache`` on copies of the caches: token ``i`` to slot
    ``slots[i]`` (negative: skipped; a slot named twice keeps the later token). NZ caches are 4-D
    ``[nb, T // E, bs, E]`` or 5-D ``[nb, H, D // E, bs, E]``."""
    results = []
    for tokens, cache in ((key, key_cache), (value, value_cache)):
        if tokens is None or cache is None:
            results.append(None)
            continue
        out = bits(cache.cpu()).clone()
        rows = bits(tokens.cpu())
        block_size = out.shape[-2] if nz else out.shape[1]
        for i, s in enumerate(_ints(slots)):
            if s < 0:
                continue
            blk, off = divmod(s, block_size)
            if not nz:
                out[blk, off] = rows[i]
            elif out.dim() == 5:                                    # per head: [H, D // E, E] at slot off
                out[blk, :, :, off, :] = rows[i].reshape(out.shape[1], out.shape[2], out.shape[4])
            else:
                out[blk, :, off, :] = rows[i].reshape(out.shape[1], out.shape[3])
        results.append(out.view(cache.dtype))
    return results[0], results[1]


def gather(key_cache: torch.Tensor, value_cache: torch.Tensor, block_tables: torch.Tensor, seq_lens: torch.Tensor,
           key: torch.Tensor, value: torch.Tensor, seq_offset: torch.Tensor | None, cumsum: bool,
           nz: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``npu_gather_pa_kv_cache`` on copies of the outputs: each entry's tokens to the next output rows,
    a zero row where the block-table column is past the table or the block id is outside
    ``[0, num_blocks)``; rows past the written ones keep their bits."""
    lens = _ints(seq_lens)
    if cumsum:
        lens = [b - a for a, b in zip(lens, lens[1:])]
    table = block_tables.cpu().tolist()
    offsets = _ints(seq_offset) if seq_offset is not None else [0] * len(lens)
    results = []
    for cache, out in ((key_cache, key), (value_cache, value)):
        c, o = bits(cache.cpu()), bits(out.cpu()).clone()
        num_blocks, block_size = c.shape[0], c.shape[2] if nz else c.shape[1]
        row = 0
        for b, n in enumerate(lens):
            first = offsets[b] // block_size
            for j in range(n):
                column = first + j // block_size
                blk = table[b][column] if column < len(table[b]) else -1
                if 0 <= blk < num_blocks:
                    token = c[blk, :, j % block_size, :] if nz else c[blk, j % block_size]
                    o[row] = token.reshape(o[row].shape)
                else:
                    o[row] = 0
                row += 1
        results.append(o.view(out.dtype))
    return results[0], results[1]
