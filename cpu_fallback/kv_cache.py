"""KV cache write as one scatter of whole rows into the chosen layer."""

from __future__ import annotations

import numpy as np
import torch

from ascend_kv.calls import KvCacheCall


def kv_cache(call: KvCacheCall) -> None:
    """Write ``call.new_kv`` ``[ntokens, hidden]`` into ``call.past[layer_id]`` in place.

    Token ``t`` of batch entry ``b`` lands at ``past[layer_id, b, write_start[b] + t - read_start[b]]``;
    the scatter honours any strides of ``past``.
    """
    if call.ntokens == 0:
        return
    batch = len(call.seq_len)
    entry = np.repeat(np.arange(batch, dtype=np.int64), call.seq_len)            # [ntokens]
    position = np.repeat(call.write_start - call.read_start, call.seq_len)       # [ntokens]
    position += np.arange(call.ntokens, dtype=np.int64)
    device = call.past.device
    layer = call.past[call.layer_id]                                             # [batch, max_seq_len, hidden]
    layer.index_put_(
        (torch.from_numpy(entry).to(device), torch.from_numpy(position).to(device)), call.new_kv
    )
