"""The kernels' host build runs unchanged as the kernel library of a PrivateUse1 device whose tensors hold host memory.

On the fake NPU of tests/fake_npu (an A2 part, the host build as its kernel library) the public
functions run the kernels, which read the raw index tensors where they live, on the device: a call
reads nothing back to the host, writes strided caches' views in place, and its results equal the
safe reference computed on host copies. Host index tensors are moved to the device in one upload;
index tensors on another device than the data are refused, naming the tensor.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import fake_npu
import pytest
import safe_reference
import torch
from calls import KvCacheArgs, PagedLoadArgs, ReshapeAndCacheArgs
from cases import ND, NZ, bits_equal, random_bits
from test_sim import KERNELS, kernels_on_the_fake_npu, ran_on

import ascend_kv


@pytest.fixture(scope="module", autouse=True)
def kernels() -> Iterator[None]:
    with kernels_on_the_fake_npu():
        yield


def npu(t: torch.Tensor, index: int = 0) -> torch.Tensor:
    return t.to(f"npu:{index}")


def test_kv_cache_reads_device_indices_without_a_transfer() -> None:
    past = random_bits((2, 3, 8, 32), torch.float16, 1)
    new_kv = random_bits((6, 32), torch.float16, 2)
    token_offset = torch.tensor([3, 9, 2**40], dtype=torch.int64)  # the last entry lands nowhere
    seq_len = torch.tensor([3, 2, 1], dtype=torch.int32)
    layer = torch.tensor([1], dtype=torch.int32)
    expected = KvCacheArgs(new_kv, past.clone(), layer, token_offset, seq_len)
    safe_reference.kv_cache(expected)
    device_past, device_args = npu(past), [npu(t) for t in (new_kv, layer, token_offset, seq_len)]
    with ran_on(KERNELS), fake_npu.counting() as seen:
        ascend_kv.kv_cache(device_args[0], device_args[1], device_past, *device_args[2:])
    assert seen.transfers == 0 and seen.uploads == 0
    assert bits_equal(device_past.cpu(), expected.past)


@pytest.mark.parametrize("layout", [ND, NZ])
def test_paged_load_of_block_interleaved_caches_on_the_device(layout) -> None:
    """K and V held block by block in one device buffer, outputs rows of a wider device buffer."""
    shape = (4, 2, 16, 2, 16) if layout == ND else (4, 2, 2, 16, 16)
    buffer = random_bits(shape, torch.float16, 3)
    table = torch.tensor([[3, 0], [1, -1]], dtype=torch.int32)
    context_lens = torch.tensor([20, 7], dtype=torch.int64)
    row = (2, 16) if layout == ND else (32,)
    out = torch.zeros((27, 40), dtype=torch.float16)
    expected = PagedLoadArgs(layout, buffer[:, 0], buffer[:, 1], table, context_lens, None, False,
                             out[:, 4:36].unflatten(1, row).clone(), out[:, 4:36].unflatten(1, row).clone())
    safe_reference.paged_cache_load(expected)
    device_buffer, key_out, value_out = npu(buffer), npu(out), npu(out)
    key, value = key_out[:, 4:36].unflatten(1, row), value_out[:, 4:36].unflatten(1, row)
    device_table, device_lens = npu(table), npu(context_lens)
    with ran_on(KERNELS), fake_npu.counting() as seen:
        ascend_kv.paged_cache_load(device_buffer[:, 0], device_buffer[:, 1], device_table, device_lens,
                                   kv_cache_cfg=layout, key=key, value=value)
    assert seen.transfers == 0 and seen.uploads == 0
    assert bits_equal(key.cpu(), expected.key) and bits_equal(value.cpu(), expected.value)
    assert bits_equal(key_out.cpu()[:, :4], out[:, :4]) and bits_equal(key_out.cpu()[:, 36:], out[:, 36:])


@pytest.mark.parametrize(("layout", "index_dtype"), [(ND, torch.int32), (NZ, torch.int64)])
def test_reshape_and_cache_reads_device_slots_without_a_transfer(layout, index_dtype) -> None:
    """key/value column slices of a device QKV buffer into K and V caches held block by block in one
    device buffer; garbage slots (out of range, int limits) are skipped, padding writes nothing."""
    info = torch.iinfo(index_dtype)
    slots = torch.tensor([17, 18, -1, info.max, info.min, 64, 0, 63], dtype=index_dtype)
    qkv = random_bits((10, 3 * 32 + 4), torch.float16, 7)
    shape = (4, 2, 16, 2, 16) if layout == ND else (4, 2, 2, 16, 16)
    buffer = random_bits(shape, torch.float16, 8)
    key, value = qkv[:, 36:68].unflatten(1, (2, 16)), qkv[:, 68:].unflatten(1, (2, 16))
    expected = ReshapeAndCacheArgs(layout, key, value, buffer[:, 0].clone(), buffer[:, 1].clone(), slots)
    safe_reference.reshape_and_cache(expected)
    device_qkv, device_buffer = npu(qkv), npu(buffer)
    device_key, device_value = device_qkv[:, 36:68].unflatten(1, (2, 16)), device_qkv[:, 68:].unflatten(1, (2, 16))
    device_slots = npu(slots)
    with ran_on(KERNELS), fake_npu.counting() as seen:
        ascend_kv.reshape_and_cache(device_key, device_value, device_buffer[:, 0], device_buffer[:, 1], device_slots,
                                    kv_cache_cfg="nd" if layout == ND else "nz")
    assert seen.transfers == 0 and seen.uploads == 0
    written = device_buffer.cpu()
    assert bits_equal(written[:, 0], expected.key_cache) and bits_equal(written[:, 1], expected.value_cache)


def test_host_slots_move_to_the_device_caches_in_key_only_mode() -> None:
    """Host slots with device data (key only): the slots move to the device in one non-blocking upload."""
    cache = random_bits((3, 8, 1, 33), torch.float16, 9)
    key = random_bits((4, 1, 33), torch.float16, 10)
    slots = torch.tensor([23, -1, 0, 9])
    expected = ReshapeAndCacheArgs(ND, key, None, cache.clone(), None, slots)
    safe_reference.reshape_and_cache(expected)
    device_cache, device_key = npu(cache), npu(key)
    with ran_on(KERNELS), fake_npu.counting() as seen:
        ascend_kv.reshape_and_cache(device_key, None, device_cache, None, slots)
    assert (seen.transfers, seen.uploads, seen.blocking_uploads) == (0, 1, 0)
    assert bits_equal(device_cache.cpu(), expected.key_cache)


def test_index_tensors_on_another_device_are_refused() -> None:
    """Index tensors on the host or on the data's device are taken; on another NPU they are refused,
    naming the tensor, before anything runs."""
    past = npu(torch.zeros((1, 2, 4, 16), dtype=torch.float16))
    message = "seq_len is on npu:1, but index tensors must be on the host (cpu) or on the data's device npu:0"
    with ran_on(KERNELS, calls=0), pytest.raises(ValueError, match=re.escape(message)):
        ascend_kv.kv_cache(npu(torch.zeros((2, 16), dtype=torch.float16)), 0, past, npu(torch.tensor([1, 1])),
                           npu(torch.tensor([1, 1]), 1))
    cache = npu(torch.zeros((2, 4, 1, 16), dtype=torch.float16))
    message = "slot_mapping is on npu:1, but index tensors must be on the host (cpu) or on the data's device npu:0"
    with ran_on(KERNELS, calls=0), pytest.raises(ValueError, match=re.escape(message)):
        ascend_kv.reshape_and_cache(npu(torch.zeros((2, 1, 16), dtype=torch.float16)), None, cache, None,
                                    npu(torch.tensor([1, 2]), 1))
    assert not cache.cpu().any()


def test_host_index_tensors_move_to_the_device_data() -> None:
    """Host index tensors with device data: one non-blocking upload, then the kernels."""
    past = random_bits((1, 2, 8, 32), torch.float16, 5)
    new_kv = random_bits((3, 32), torch.float16, 6)
    expected = KvCacheArgs(new_kv, past.clone(), 0, torch.tensor([2, 8]), torch.tensor([2, 1]))
    safe_reference.kv_cache(expected)
    device_past, device_new_kv = npu(past), npu(new_kv)
    with ran_on(KERNELS), fake_npu.counting() as seen:
        ascend_kv.kv_cache(device_new_kv, 0, device_past, torch.tensor([2, 8]), torch.tensor([2, 1]))
    assert (seen.transfers, seen.uploads, seen.blocking_uploads) == (0, 1, 0)
    assert bits_equal(device_past.cpu(), expected.past)
