"""The fake NPU itself (tests/fake_npu): real memory, views, the CPU-kernel fallback, and what it counts.

Other tests trust it to prove "no device-to-host transfer"; these prove it counts what it claims
and nothing else, and leaves CPU tensors alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import fake_npu
import pytest
import torch
from cases import bits_equal
from hypothesis import given
from hypothesis import strategies as st
from torch.testing._utils import freeze_rng_state

fake_npu.install()

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64, torch.bool]


def random_bytes(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """A tensor of ``dtype`` whose bytes are random (NaN payloads included; bool is 0 or 1)."""
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    numel = torch.Size(shape).numel()
    raw = torch.randint(0, 256, (numel * dtype.itemsize,), generator=generator, dtype=torch.uint8)
    return raw.view(dtype).reshape(shape)


def on_device(host: torch.Tensor) -> torch.Tensor:
    return host.to("npu")


def host_grid() -> torch.Tensor:
    """[4, 6] float32, values 0..23."""
    return torch.arange(24, dtype=torch.float32).reshape(4, 6)


@given(
    dtype=st.sampled_from(DTYPES),
    shape=st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple),
    seed=st.integers(0, 2**16),
)
def test_round_trip_is_bit_exact_with_one_upload_and_one_transfer(dtype, shape, seed):
    host = random_bytes(shape, dtype, seed)
    with fake_npu.counting() as seen:
        device = on_device(host)
        back = device.cpu()
    assert device.device == torch.device("npu", 0)
    assert bits_equal(back, host)
    assert (seen.uploads, seen.transfers) == (1, 1)


@pytest.mark.parametrize("nbytes", [1, 63, 64, 65, 4096 + 1])
def test_device_memory_is_aligned_to_64_bytes(nbytes):
    allocated = torch.empty(nbytes, dtype=torch.uint8, device="npu")
    assert allocated.data_ptr() % 64 == 0
    assert (allocated + 1).data_ptr() % 64 == 0  # a result the CPU kernel allocated


VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "slice": lambda t: t[1:, 2:5],
    "transpose": lambda t: t.t(),
    "select": lambda t: t[2],
    "view": lambda t: t.view(3, 8),
    "reshape": lambda t: t.reshape(2, 12),
    "as_strided": lambda t: t.as_strided((2, 3), (1, 6), 7),
    "unfold": lambda t: t.unfold(1, 2, 2),
    "diagonal": lambda t: t.diagonal(),
    "expand": lambda t: t[:1].expand(3, 6),
    "split": lambda t: t.split(3, dim=1)[1],
    "unbind": lambda t: t.unbind(0)[3],
    "view_as_real": lambda t: torch.view_as_real(t.view(torch.complex64)),
    "view_dtype": lambda t: t.view(torch.int32),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_views_share_memory_at_the_host_views_offsets_and_strides(name):
    host = host_grid()
    device = on_device(host)
    host_view, device_view = VIEWS[name](host), VIEWS[name](device)
    assert device_view.device == device.device
    assert device_view.data_ptr() - device.data_ptr() == host_view.data_ptr() - host.data_ptr()
    assert (device_view.shape, device_view.stride()) == (host_view.shape, host_view.stride())
    device_view.zero_()  # writing through the view writes the base's memory
    host_view.zero_()
    assert bits_equal(device.cpu(), host)


IN_PLACE: dict[str, Callable[[torch.Tensor], object]] = {
    "add_": lambda t: t.add_(1.5),
    "mul_ on a view": lambda t: t[:, 1::2].mul_(-1),
    "index_put_": lambda t: t.index_put_((idx(t, [3, 0]),), torch.full((2, 6), 7.0, device=t.device)),
    "index_put_ accumulate": lambda t: t.index_put_((idx(t, [1, 1]),), torch.ones(6, device=t.device), True),
    "index_copy_": lambda t: t.index_copy_(1, idx(t, [5, 0]), torch.zeros(4, 2, device=t.device)),
    "scatter_": lambda t: t.scatter_(1, idx(t, [[2], [0], [1], [5]]), -1.0),
    "masked_fill_": lambda t: t.masked_fill_(t > 10, 0.5),
    "copy_ into a view": lambda t: t[1:3, :2].copy_(t[:2, 4:]),
    "clamp_": lambda t: t.clamp_(3, 20),
    "fill_": lambda t: t[2].fill_(9),
    "zero_": lambda t: t[:, 3].zero_(),
    "_foreach_add_": lambda t: torch._foreach_add_([t[0], t[1]], 2.0),
}


def idx(like: torch.Tensor, values: list) -> torch.Tensor:
    """An int64 index tensor on ``like``'s device."""
    return torch.tensor(values, dtype=torch.int64).to(like.device)


@pytest.mark.parametrize("name", list(IN_PLACE))
def test_in_place_ops_mutate_the_device_memory_without_transfers(name):
    host = host_grid()
    device = on_device(host)
    address = device.data_ptr()
    IN_PLACE[name](host)
    with fake_npu.counting() as seen:
        IN_PLACE[name](device)
    assert seen.transfers == 0
    assert device.data_ptr() == address
    assert bits_equal(device.cpu(), host)


OUT_OF_PLACE: dict[str, Callable[[torch.Tensor], object]] = {
    "index_select": lambda t: t.index_select(0, idx(t, [3, 1, 3])),
    "index with a long tensor": lambda t: t[idx(t, [2, 0])],
    "gather": lambda t: t.gather(1, idx(t, [[0, 5], [1, 1], [2, 0], [3, 3]])),
    "scatter": lambda t: t.scatter(0, idx(t, [[3, 2, 1, 0, 1, 2]]), 100.0),
    "where": lambda t: torch.where(t > 7, t, -t),
    "cumsum": lambda t: t.cumsum(1),
    "searchsorted": lambda t: torch.searchsorted(t[0].contiguous(), t[1:] - 6.5),
    "clamp": lambda t: t.clamp(2, 17),
    "clamp by a tensor (optional tensor arguments)": lambda t: t.clamp(min=t[1] - 4, max=None),
    "index with a slice and a tensor (None in Tensor?[])": lambda t: t[:, idx(t, [5, 0])],
    "arange": lambda t: torch.arange(3, 30, 4, device=t.device),
    "sum": lambda t: t.sum(0),
    "max with indices": lambda t: t.max(1),
    "sort": lambda t: (-t).sort(1),
    "cat": lambda t: torch.cat([t, t[:1]]),
    "half": lambda t: t.half(),
    "nonzero_static": lambda t: torch.nonzero_static(t > 20, size=5),
    "repeat_interleave with output_size": lambda t: t[0].repeat_interleave(idx(t, [1, 0, 2, 1, 0, 1]), output_size=5),
    "repeat_interleave by an int": lambda t: t[0].repeat_interleave(2),
    "masked_scatter": lambda t: t.masked_scatter(t > 20, -t),
    "histc with a range": lambda t: t.histc(4, 0, 24),
}


def flat(result: object) -> list[torch.Tensor]:
    return [result] if isinstance(result, torch.Tensor) else list(result)  # type: ignore[call-overload]


@pytest.mark.parametrize("name", list(OUT_OF_PLACE))
def test_ops_run_on_the_device_without_transfers(name):
    host = host_grid()
    device = on_device(host)
    with fake_npu.counting() as seen:
        result = OUT_OF_PLACE[name](device)
    assert seen.transfers == 0
    expected = flat(OUT_OF_PLACE[name](host))
    for got, want in zip(flat(result), expected):
        assert got.device == device.device
        assert bits_equal(got.cpu(), want)


# Each reads device values on the host once.
TRANSFERS: dict[str, Callable[[torch.Tensor], object]] = {
    "cpu()": lambda t: t.cpu(),
    'to("cpu")': lambda t: t.to("cpu"),
    "to(cpu, non_blocking)": lambda t: t.to("cpu", non_blocking=True),
    "copy_ into a host tensor": lambda t: torch.empty(4, 6).copy_(t),
    "tolist()": lambda t: t.tolist(),
    "numpy(force=True)": lambda t: t.numpy(force=True),
    "item()": lambda t: t[1, 2].item(),
    "bool()": lambda t: bool(t[0, 1]),
    "int()": lambda t: int(t[0, 1]),
    "float()": lambda t: float(t[0, 1]),
    "nonzero": lambda t: t.nonzero(),
    "argwhere": lambda t: torch.argwhere(t),
    "where(cond)": lambda t: torch.where(t > 3),
    "boolean-mask indexing": lambda t: t[t > 3],
    "boolean-mask write of a device value": lambda t: t.__setitem__(t > 3, torch.zeros((), device=t.device)),
    "masked_select": lambda t: t.masked_select(t > 3),
    "unique": lambda t: torch.unique(t),
    "unique(dim)": lambda t: torch.unique(t, dim=0),
    "unique_consecutive": lambda t: torch.unique_consecutive(t),
    "repeat_interleave by a tensor": lambda t: t[0].repeat_interleave(idx(t, [1, 0, 2, 1, 0, 1])),
    "bincount": lambda t: t.long().flatten().bincount(),
    "histc without a range": lambda t: t.histc(4),
    "equal": lambda t: torch.equal(t, t),
    "torch.npu.synchronize": lambda t: torch.npu.synchronize(),
    "torch.accelerator.synchronize": lambda t: torch.accelerator.synchronize(),
    "stream synchronize": lambda t: torch.npu.current_stream().synchronize(),
}


@pytest.mark.parametrize("name", list(TRANSFERS))
def test_each_transfer_counts_exactly_once(name):
    device = on_device(host_grid())
    index_uploads = 1 if "repeat_interleave" in name else 0  # the repeats tensor built by idx()
    with fake_npu.counting() as seen:
        TRANSFERS[name](device)
    assert (seen.transfers, seen.uploads) == (1, index_uploads)


def test_the_same_op_on_host_tensors_counts_nothing():
    host = host_grid()
    with fake_npu.counting() as seen:
        for name, op in TRANSFERS.items():
            if "synchronize" not in name:
                op(host)
    assert (seen.transfers, seen.uploads) == (0, 0)


def test_uploads_count_blocking_unless_non_blocking_from_pinned_memory():
    host = host_grid()
    pinned = host.pin_memory()
    device = on_device(host)
    with fake_npu.counting() as blocking:
        host.to("npu")
        host.to("npu", non_blocking=True)  # pageable: a real NPU waits all the same
        device.copy_(host)
    with fake_npu.counting() as asynchronous:
        uploaded = pinned.to("npu", non_blocking=True)
    assert (blocking.uploads, blocking.blocking_uploads, blocking.transfers) == (3, 3, 0)
    assert (asynchronous.uploads, asynchronous.blocking_uploads, asynchronous.transfers) == (1, 0, 0)
    assert bits_equal(uploaded.cpu(), host)


def test_host_index_tensors_are_uploaded_once_by_advanced_indexing():
    device = on_device(host_grid())
    rows = torch.tensor([3, 0])
    with fake_npu.counting() as read:
        got = device[rows]
    with fake_npu.counting() as written:
        device[rows] = torch.zeros(2, 6, device="npu")
    assert (read.uploads, read.transfers, written.uploads, written.transfers) == (1, 0, 1, 0)
    assert bits_equal(got.cpu(), host_grid()[rows])


def test_a_host_mask_costs_an_upload_not_a_transfer():
    host, device = host_grid(), on_device(host_grid())
    mask = host > 3
    with fake_npu.counting() as seen:
        device[mask] = torch.zeros(20, device="npu")
    host[mask] = 0.0
    assert (seen.transfers, seen.uploads) == (0, 1)
    assert bits_equal(device.cpu(), host)


def test_a_masked_write_of_a_host_scalar_needs_no_transfer():
    # ATen turns it into masked_fill_, which needs no values: nothing to count.
    host, device = host_grid(), on_device(host_grid())
    with fake_npu.counting() as seen:
        device[device > 3] = torch.tensor(-1.0)
    host[host > 3] = -1.0
    assert seen.transfers == 0
    assert bits_equal(device.cpu(), host)


def test_pin_memory():
    host = host_grid()
    assert not host.is_pinned()
    pinned = host.pin_memory()
    assert pinned.is_pinned() and bits_equal(pinned, host)
    assert torch.empty(3, pin_memory=True).is_pinned()
    assert pinned[1:].is_pinned()  # inside a pinned allocation
    with pytest.raises(RuntimeError, match="pinned"):
        torch.empty(3, device="npu", pin_memory=True)


def test_a_tensor_can_report_a_non_base_storage_format():
    device = on_device(host_grid())
    other = on_device(host_grid())
    assert fake_npu.storage_format(device) == fake_npu.FORMAT_ND == torch.npu.get_npu_format(device)
    fake_npu.set_storage_format(device, fake_npu.FORMAT_FRACTAL_NZ)
    assert torch.npu.get_npu_format(device[1:, ::2]) == fake_npu.FORMAT_FRACTAL_NZ  # views share the storage
    assert torch.npu.get_npu_format(other) == fake_npu.FORMAT_ND
    assert torch.npu.get_npu_format(device.clone()) == fake_npu.FORMAT_ND  # new memory
    assert bits_equal(device.cpu(), host_grid())  # only reported: the bytes stay


def test_device_module_and_devices(monkeypatch):
    count = int(os.environ.get(fake_npu.DEVICE_COUNT_ENV, fake_npu.DEFAULT_DEVICE_COUNT))
    assert torch.npu.is_available() and torch.npu.device_count() == count
    last = torch.arange(4, device=f"npu:{count - 1}")
    assert (last + 1).device == torch.device("npu", count - 1)
    assert torch.empty(1, device="npu").device == torch.device("npu", torch.npu.current_device())
    torch.npu.set_device(count - 1)
    try:
        assert torch.empty(1, device="npu").device == torch.device("npu", count - 1)
    finally:
        torch.npu.set_device(0)
    assert host_grid().npu().is_npu
    monkeypatch.delenv("ASCEND_KV_SOC", raising=False)
    assert torch.npu.get_device_name(0) == fake_npu.DEFAULT_SOC
    monkeypatch.setenv("ASCEND_KV_SOC", "Ascend310P3")
    assert torch.npu.get_device_name(0) == "Ascend310P3"
    with pytest.raises(RuntimeError, match="out of range"):
        torch.empty(1, device=f"npu:{count}")


def test_out_variants_resize_and_return_their_output():
    device = on_device(host_grid())
    out = torch.empty(0, device="npu")
    returned = torch.add(device, 1, out=out)
    assert returned is out and out.shape == (4, 6)
    assert bits_equal(out.cpu(), host_grid() + 1)


def test_resize_keeps_the_contents_and_set_shares_storage():
    device = on_device(host_grid())
    grown = device.clone().resize_(40)
    assert bits_equal(grown[:24].cpu(), host_grid().flatten())
    alias = torch.empty(0, device="npu").set_(device.untyped_storage(), 6, (3, 6), (6, 1))
    assert alias.data_ptr() == device[1].data_ptr()
    assert torch.empty(0, device="npu").set_(device).is_set_to(device)


def test_conjugate_and_negative_views_resolve_when_copied():
    values = torch.complex(torch.arange(3.0), torch.arange(3.0) + 1)
    device = on_device(values)
    assert bits_equal(device.conj().cpu(), values.conj().resolve_conj())
    assert bits_equal(device.conj().imag.cpu(), values.conj().imag.resolve_neg())


def test_mixing_devices_fails_as_on_a_device():
    with pytest.raises(RuntimeError, match="same device"):
        on_device(host_grid()) + host_grid()
    with pytest.raises(RuntimeError, match="same device"):
        on_device(host_grid()).index_select(0, torch.tensor([0]))
    assert bits_equal((on_device(host_grid()) * torch.tensor(2.0)).cpu(), host_grid() * 2)  # host scalars pass


def test_autograd_runs_on_the_device():
    device = on_device(host_grid()).requires_grad_()
    (device * device).sum().backward()
    assert device.grad is not None and device.grad.is_npu
    assert bits_equal(device.grad.cpu(), host_grid() * 2)


def test_install_is_idempotent_and_host_tensors_stay_on_the_host():
    module = torch.npu
    fake_npu.install()
    assert torch.npu is module
    assert torch.empty(2).device.type == "cpu" and torch.get_default_device().type == "cpu"
    assert not host_grid().is_pinned()


def test_host_random_numbers_are_unchanged_by_the_device_rng_functions():
    # torch's helpers save and restore every accelerator's random state (opcheck does).
    torch.manual_seed(7)
    with freeze_rng_state():
        first = torch.rand(4)
    assert torch.equal(torch.rand(4), first)
    torch.manual_seed(7)
    assert torch.equal(torch.rand(4), first)
