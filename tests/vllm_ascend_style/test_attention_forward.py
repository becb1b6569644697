"""An attention layer's KV cache on CPU, tested the way vllm-ascend tests its attention code, byte for byte.

The layer (``tiny_engine``) binds ``torch_npu`` at import, as vllm-ascend's modules do; the
conftest's stub is vllm-ascend's, with ascend_kv's cache ops installed on it. The tests use
their tools: ``@patch`` of the forward context and the device type, MagicMock configs and
metadata, the stub's own MagicMocks for call assertions, ``patch.object(..., wraps=...)``. Two
steps run (a prefill of two sequences, then a decode step, each batch padded with slot -1);
after each, every byte of both caches must equal a plain reference written token by token, and
the context rows the layer loaded and its output must equal the reference's.

Each variant is a real call form: vllm-ascend 0.23 (``_npu_reshape_and_cache`` with
``atb.npu_paged_cache_load``), main on A2/A3 (``npu_scatter_pa_kv_cache(cache_mode="Norm")``
with ``npu_gather_pa_kv_cache(seq_offset=)``; ``PA_NZ`` into 4-D caches and into the 5-D
per-head view), main on 310P (NZ caches from ``empty_with_format(..., acl_format=29)``, one per
cache or one K/V buffer indexed ``kv[0]``, ``kv[1]``).
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any
from unittest.mock import MagicMock, patch

import pytest
import torch

import ascend_kv

BLOCK_SIZE = 16
NUM_BLOCKS = 5
#: Block tables of the two sequences (the second needs one block; its -1 column is never read).
BLOCK_TABLES = [[3, 1], [4, -1]]
#: (new tokens per sequence, rows of the padded batch) of each step: a prefill, then a decode step.
STEPS = [((20, 5), 28), ((1, 1), 4)]


@dataclass(frozen=True)
class Variant:
    """One engine configuration: who writes and reads, and how the caches are allocated."""

    name: str
    release: str  # "main" or "0.23"
    device_type: str  # "A2" or "310P"
    nz_write: str | None  # None, "4d" or "5d"
    allocation: str  # "nd" (one [2, nb, bs, H, D] buffer), "nz" (empty_with_format per cache), "nz_buffer"
    dtype: torch.dtype
    num_kv_heads: int
    head_size: int


VARIANTS = [
    Variant("0.23-reshape_and_cache-atb_load-nd", "0.23", "A2", None, "nd", torch.bfloat16, 2, 64),
    Variant("main-scatter_norm-gather-nd", "main", "A2", None, "nd", torch.bfloat16, 2, 64),
    Variant("main-scatter_pa_nz_4d-gather-nz", "main", "A2", "4d", "nz", torch.float16, 2, 64),
    Variant("main-scatter_pa_nz_5d_view-gather-nz", "main", "A2", "5d", "nz", torch.float16, 2, 64),
    Variant("main_310p-reshape_and_cache-atb_load-nz", "main", "310P", None, "nz", torch.float16, 2, 64),
    Variant("main_310p-one_kv_buffer_16x16x16-nz", "main", "310P", None, "nz_buffer", torch.float16, 2, 128),
]


@pytest.fixture(scope="module")
def engine(torch_npu_stub: types.ModuleType) -> Any:
    """The engine, imported under the stub (it binds ``torch_npu`` at import)."""
    import tiny_engine

    assert tiny_engine.torch_npu is torch_npu_stub
    return tiny_engine


def random_bits(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Any bit pattern of a 2-byte ``dtype`` (what an uninitialised cache holds)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-2**15, 2**15, shape, generator=g, dtype=torch.int16).view(dtype)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


def vllm_config(v: Variant) -> MagicMock:
    """A MagicMock ``VllmConfig``, as vllm-ascend's tests build theirs."""
    config = MagicMock()
    config.model_config.num_heads = 4
    config.model_config.num_kv_heads = v.num_kv_heads
    config.model_config.head_size = v.head_size
    config.model_config.hidden_size = 64
    config.model_config.dtype = v.dtype
    config.cache_config.block_size = BLOCK_SIZE
    config.additional_config = {"nz_write": v.nz_write}
    return config


def allocate(torch_npu: Any, v: Variant) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's caches as each engine allocates them, filled with random bits."""
    width = v.num_kv_heads * v.head_size
    e = 32 // v.dtype.itemsize
    nz_shape = [NUM_BLOCKS, width // e, BLOCK_SIZE, e]
    if v.allocation == "nd":
        kv = torch.empty(2, NUM_BLOCKS, BLOCK_SIZE, v.num_kv_heads, v.head_size, dtype=v.dtype)
        caches = (kv[0], kv[1])
    elif v.allocation == "nz":
        caches = tuple(torch_npu.empty_with_format(size=nz_shape, dtype=v.dtype, device="cpu", acl_format=29)
                       for _ in range(2))
    else:
        kv = torch_npu.empty_with_format(size=[2, *nz_shape], dtype=v.dtype, device="cpu", acl_format=29)
        caches = (kv[0], kv[1])
    for i, cache in enumerate(caches):
        cache.copy_(random_bits(tuple(cache.shape), v.dtype, i))
    return caches[0], caches[1]


def slot(seq: int, position: int) -> int:
    return BLOCK_TABLES[seq][position // BLOCK_SIZE] * BLOCK_SIZE + position % BLOCK_SIZE


def step_metadata(step: int) -> MagicMock:
    """The step's ``attn_metadata``: a MagicMock with the fields the layer reads."""
    new_tokens, rows = STEPS[step]
    done = [sum(STEPS[s][0][b] for s in range(step)) for b in range(2)]
    slots = [slot(b, done[b] + i) for b in range(2) for i in range(new_tokens[b])]
    meta = MagicMock()
    meta.num_actual_tokens = len(slots)
    meta.slot_mapping = torch.tensor(slots + [-1] * (rows - len(slots)), dtype=torch.int32)
    meta.query_lens = torch.tensor(new_tokens, dtype=torch.int32)
    meta.seq_lens = torch.tensor([done[b] + new_tokens[b] for b in range(2)], dtype=torch.int32)
    meta.block_tables = torch.tensor(BLOCK_TABLES, dtype=torch.int32)
    meta.seq_starts = torch.zeros(2, dtype=torch.int32)
    return meta


def token_rows(cache: torch.Tensor, slots: list[int], nz: bool) -> torch.Tensor:
    """The rows of ``slots`` in a reference cache, each ``[T]``."""
    out = []
    for s in slots:
        block, offset = divmod(s, BLOCK_SIZE)
        out.append((cache[block, :, offset, :] if nz else cache[block, offset]).reshape(-1))
    return torch.stack(out)


def write_reference(cache: torch.Tensor, rows: torch.Tensor, slots: list[int], nz: bool) -> None:
    """Token ``i`` to slot ``slots[i]``, one at a time; negative slots skipped."""
    for row, s in zip(rows, slots):
        if s < 0:
            continue
        block, offset = divmod(s, BLOCK_SIZE)
        if nz:
            cache[block, :, offset, :] = row.reshape(cache.shape[1], cache.shape[3])
        else:
            cache[block, offset] = row.reshape(cache.shape[2], cache.shape[3])


def run_steps(engine: Any, torch_npu: Any, v: Variant) -> None:
    """Both steps through the layer, each checked against the reference."""
    torch.manual_seed(0)
    layer = engine.TinyAttention(vllm_config(v))
    key_cache, value_cache = allocate(torch_npu, v)
    reference = [key_cache.clone(), value_cache.clone()]
    nz = v.allocation != "nd"
    for step, (_, rows) in enumerate(STEPS):
        meta = step_metadata(step)
        hidden = torch.randn(rows, 64, dtype=v.dtype)
        with patch.object(engine, "get_forward_context", return_value=MagicMock(attn_metadata=meta)), \
                patch.object(engine, "get_device_type", return_value=v.device_type), \
                patch.object(engine, "RELEASE", v.release):
            output, key, value = layer(hidden, (key_cache, value_cache))

        q, k, val = layer.qkv_proj(hidden).split([4 * v.head_size, v.num_kv_heads * v.head_size,
                                                  v.num_kv_heads * v.head_size], dim=-1)
        slots = meta.slot_mapping.tolist()
        for cache, tokens in zip(reference, (k, val)):
            write_reference(cache, tokens, slots, nz)
        for actual, expected, name in ((key_cache, reference[0], "key"), (value_cache, reference[1], "value")):
            assert torch.equal(bits(actual), bits(expected)), f"step {step}: {name}_cache differs from the reference"

        context = [slot(b, p) for b in range(2) for p in range(int(meta.seq_lens[b]))]
        want_key, want_value = (token_rows(cache, context, nz).view(-1, v.num_kv_heads, v.head_size)
                                for cache in reference)
        assert torch.equal(bits(key), bits(want_key)) and torch.equal(bits(value), bits(want_value)), step
        want = engine.attention(q[:meta.num_actual_tokens].reshape(-1, 4, v.head_size), want_key, want_value,
                                meta.query_lens, meta.seq_lens)
        assert torch.equal(output, want), f"step {step}: the attention output differs"


@pytest.mark.parametrize("v", VARIANTS, ids=lambda v: v.name)
def test_two_steps_of_an_attention_layer_write_and_read_every_cache_byte(engine: Any, torch_npu_stub: Any,
                                                                         v: Variant) -> None:
    run_steps(engine, torch_npu_stub, v)
    atb_write = v.nz_write is None and (v.release == "0.23" or v.device_type == "310P")
    assert torch_npu_stub._npu_reshape_and_cache.call_count == (len(STEPS) if atb_write else 0)


def test_the_stubs_own_mock_records_the_real_call(engine: Any, torch_npu_stub: Any) -> None:
    """The stub's ``_npu_reshape_and_cache`` MagicMock stays: it runs the op and records the call."""
    key_cache, value_cache = torch.zeros(2, 2, BLOCK_SIZE, 1, 32, dtype=torch.bfloat16)
    key = torch.randn(3, 1, 32, dtype=torch.bfloat16)
    slots = torch.tensor([17, -1, 2], dtype=torch.int32)
    with patch.object(engine, "RELEASE", "0.23"):
        engine.device_adaptor().reshape_and_cache(key, key, key_cache, value_cache, slots)
    torch_npu_stub._npu_reshape_and_cache.assert_called_once()
    assert torch_npu_stub._npu_reshape_and_cache.call_args.kwargs["slot_indices"] is slots
    assert torch.equal(key_cache[1, 1], key[0]) and torch.equal(value_cache[0, 2], key[2])
    assert key_cache.view(-1, 32).count_nonzero(dim=1).bool().sum() == 2  # nothing else written


@patch("tiny_engine.get_device_type", return_value="A2")
def test_a_patched_op_wraps_the_real_one(mock_device_type: MagicMock, engine: Any, torch_npu_stub: Any) -> None:
    """An op the stub did not have (installed as a function): ``patch.object(..., wraps=...)`` records its calls."""
    key_cache, value_cache = torch.zeros(2, 3, BLOCK_SIZE, 1, 16)
    table, lens = torch.tensor([[2, -1]], dtype=torch.int32), torch.tensor([20], dtype=torch.int32)
    starts = torch.tensor([0], dtype=torch.int32)
    key_cache[2, 3] = 1.0
    key, value = torch.full((20, 1, 16), 7.0), torch.full((20, 1, 16), 7.0)
    with patch.object(torch_npu_stub, "npu_gather_pa_kv_cache", wraps=torch_npu_stub.npu_gather_pa_kv_cache) as gather:
        engine.device_adaptor().kv_cache_load(key_cache, value_cache, table, lens, starts, key, value)
    gather.assert_called_once()
    assert gather.call_args.kwargs["seq_offset"] is starts
    assert torch.equal(key[3], torch.ones(1, 16)) and not key[16:].any()  # block -1: zero rows, as torch_npu
    mock_device_type.assert_called()


def test_a_mock_weight_passes_through_npu_format_cast(torch_npu_stub: Any) -> None:
    """vllm-ascend's quantization tests cast MagicMock weights; the stub's pass-through behaviour stays."""
    weight = MagicMock()
    assert torch_npu_stub.npu_format_cast(weight, 29) is weight
    torch_npu_stub.npu_format_cast.assert_called_once_with(weight, 29)
    cache = torch_npu_stub.npu_format_cast(torch.zeros(2, 4, 16, 16, dtype=torch.float16), 29)
    assert torch_npu_stub.get_npu_format(cache) == 29 and torch_npu_stub.get_npu_format(cache[1]) == 29


def test_explain_sees_no_npu_behind_the_stub(torch_npu_stub: Any) -> None:
    """Without the stand-in mark, ascend_kv would take the stub's MagicMock ``npu`` for an NPU (its SoC a MagicMock)."""
    probes = ascend_kv.dispatch.device
    cached = (probes.torch_npu, probes.npu_runtime, probes._device_name, probes._format_getter)
    for probe in cached:
        probe.cache_clear()
    try:
        decision = ascend_kv.explain("reshape_and_cache")
        assert decision.backend == "fallback" and decision.device == "cpu", decision
        assert "MagicMock" not in repr(decision) and "no NPU here" in decision.reason, decision
    finally:
        for probe in cached:
            probe.cache_clear()
