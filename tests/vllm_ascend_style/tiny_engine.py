"""A serving engine's attention layer in miniature, written against torch_npu as vllm-ascend's is.

It binds ``torch_npu`` at import (``import torch_npu`` at the top, as vllm-ascend's
``device/device_op.py`` and ``attention/attention_v1.py`` do), reads its per-step metadata from
a forward context, picks a device adaptor by device type, and writes and reads its paged KV
cache only through torch_npu's cache ops, in the call forms of vllm-ascend 0.23 and main
(keywords, ``.contiguous()`` calls, the 5-D NZ view, ``seq_offset``). The tests in this folder
import it under their conftest's ``torch_npu`` stub.
"""

from __future__ import annotations

from typing import Any

import torch
import torch_npu
from torch import nn


def get_forward_context() -> Any:
    """The current step's context (``attn_metadata``); the tests patch it, as vllm-ascend's patch vLLM's."""
    raise RuntimeError("no forward context outside a step")


def get_device_type() -> str:
    """``"A2"``, ``"A3"`` or ``"310P"``; the tests patch it."""
    return "A2"


#: The vllm-ascend release whose call forms the layer uses: ``"main"`` or ``"0.23"`` (the tests patch it).
RELEASE = "main"


class DeviceAdaptor:
    """vllm-ascend main's ``BaseDeviceAdaptor`` (A2/A3): the aclnn scatter and gather."""

    @classmethod
    def reshape_and_cache(cls, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                          value_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        torch_npu.npu_scatter_pa_kv_cache(key=key.contiguous(), value=value.contiguous(), key_cache=key_cache,
                                          value_cache=value_cache, slot_mapping=slot_mapping.contiguous(),
                                          cache_mode="Norm")

    @staticmethod
    def kv_cache_load(key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
                      seq_lens: torch.Tensor, seq_starts: torch.Tensor | None, key: torch.Tensor,
                      value: torch.Tensor) -> None:
        torch_npu.npu_gather_pa_kv_cache(key_cache, value_cache, block_table, seq_lens.contiguous(),
                                         seq_offset=seq_starts, key=key, value=value)


class AtbDeviceAdaptor(DeviceAdaptor):
    """vllm-ascend 0.23's adaptor (and main's ``Ascend310PDeviceAdaptor``): the ATB write and load, their
    layout taken from the caches' storage format."""

    @classmethod
    def reshape_and_cache(cls, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                          value_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        torch_npu._npu_reshape_and_cache(key=key, value=value, key_cache=key_cache, value_cache=value_cache,
                                         slot_indices=slot_mapping)

    @staticmethod
    def kv_cache_load(key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
                      seq_lens: torch.Tensor, seq_starts: torch.Tensor | None, key: torch.Tensor,
                      value: torch.Tensor) -> None:
        torch_npu.atb.npu_paged_cache_load(key_cache, value_cache, block_table, seq_lens, seq_starts=seq_starts,
                                           key=key, value=value)


def device_adaptor() -> type[DeviceAdaptor]:
    """The adaptor of this device and release."""
    return AtbDeviceAdaptor if get_device_type() == "310P" or RELEASE == "0.23" else DeviceAdaptor


class TinyAttention(nn.Module):
    """One attention layer: QKV projection, the cache write, the context load, causal attention.

    ``vllm_config`` (a MagicMock in the tests) gives ``model_config.{num_heads, num_kv_heads,
    head_size, hidden_size, dtype}``, ``cache_config.block_size`` and
    ``additional_config["nz_write"]``: None (the adaptor's write), ``"4d"`` or ``"5d"`` (A2/A3's
    NZ write, ``npu_scatter_pa_kv_cache`` with its default ``cache_mode`` into the 4-D caches or
    their 5-D per-head view).
    """

    def __init__(self, vllm_config: Any) -> None:
        super().__init__()
        model = vllm_config.model_config
        self.num_heads, self.num_kv_heads, self.head_size = model.num_heads, model.num_kv_heads, model.head_size
        self.block_size = vllm_config.cache_config.block_size
        self.nz_write = vllm_config.additional_config.get("nz_write")
        width = (self.num_heads + 2 * self.num_kv_heads) * self.head_size
        self.qkv_proj = nn.Linear(model.hidden_size, width, bias=False, dtype=model.dtype)

    def _nz_5d_view(self, cache: torch.Tensor) -> torch.Tensor:
        """``[num_blocks, num_kv_heads, head_size // E, block_size, E]``, as vllm-ascend's ``_nz_5d_view``."""
        e = 32 // cache.element_size()
        return cache.view(-1, self.num_kv_heads, self.head_size // e, self.block_size, e)

    def forward(self, hidden_states: torch.Tensor, kv_cache: tuple[torch.Tensor, torch.Tensor]
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns ``(output [num_actual_tokens, num_heads * head_size], key, value)``, the last two the context
        rows the load gathered (``[sum(seq_lens), num_kv_heads, head_size]``)."""
        meta = get_forward_context().attn_metadata
        tokens = meta.num_actual_tokens
        q, k, v = self.qkv_proj(hidden_states).split(
            [self.num_heads * self.head_size, self.num_kv_heads * self.head_size, self.num_kv_heads * self.head_size],
            dim=-1)
        q = q.reshape(-1, self.num_heads, self.head_size)
        k, v = k.view(-1, self.num_kv_heads, self.head_size), v.view(-1, self.num_kv_heads, self.head_size)
        key_cache, value_cache = kv_cache
        if self.nz_write == "5d":
            torch_npu.npu_scatter_pa_kv_cache(key=k[:tokens], value=v[:tokens], key_cache=self._nz_5d_view(key_cache),
                                              value_cache=self._nz_5d_view(value_cache),
                                              slot_mapping=meta.slot_mapping[:tokens])
        elif self.nz_write == "4d":
            torch_npu.npu_scatter_pa_kv_cache(k[:tokens], v[:tokens], key_cache, value_cache,
                                              meta.slot_mapping[:tokens], cache_mode="PA_NZ")
        else:
            device_adaptor().reshape_and_cache(k, v, key_cache, value_cache, meta.slot_mapping)

        rows = int(meta.seq_lens.sum())
        nz = self.nz_write is not None or torch_npu.get_npu_format(key_cache) == 29
        shape = (rows, self.num_kv_heads * self.head_size) if nz else (rows, self.num_kv_heads, self.head_size)
        key = torch.empty(shape, dtype=key_cache.dtype)
        value = torch.empty(shape, dtype=value_cache.dtype)
        device_adaptor().kv_cache_load(key_cache, value_cache, meta.block_tables, meta.seq_lens,
                                       None if nz else meta.seq_starts, key, value)
        key = key.view(rows, self.num_kv_heads, self.head_size)
        value = value.view(rows, self.num_kv_heads, self.head_size)
        return attention(q[:tokens], key, value, meta.query_lens, meta.seq_lens), key, value


def attention(q: torch.Tensor, key: torch.Tensor, value: torch.Tensor, query_lens: torch.Tensor,
              seq_lens: torch.Tensor) -> torch.Tensor:
    """Causal attention of each sequence's new tokens (its last ``query_lens[b]``) over its ``seq_lens[b]`` rows,
    in float32; KV heads shared by ``num_heads // num_kv_heads`` query heads."""
    outputs, first_q, first_k = [], 0, 0
    group = q.shape[1] // key.shape[1]
    for n_q, n_k in zip(query_lens.tolist(), seq_lens.tolist()):
        qs = q[first_q:first_q + n_q].float().transpose(0, 1)                        # [H, n_q, D]
        ks = key[first_k:first_k + n_k].float().repeat_interleave(group, 1).transpose(0, 1)
        vs = value[first_k:first_k + n_k].float().repeat_interleave(group, 1).transpose(0, 1)
        mask = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)
        out = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask)
        outputs.append(out.transpose(0, 1).reshape(n_q, -1))
        first_q, first_k = first_q + n_q, first_k + n_k
    return torch.cat(outputs)
