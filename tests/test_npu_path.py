"""The NPU implementation end to end, on the fake NPU of tests/fake_npu with the kernels' host build.

The tensors live on PyTorch's ``PrivateUse1`` device (named ``npu``) and the operators take the
route of an NPU call: the rules, policy and SoC check through ``ASCEND_KV_SOC``, upload of host
index tensors, then the kernel library's table (tiling and launch) or the device fallback on a
product line the kernels do not support; ``torch.ops.ascend_kv._runs()`` shows which ran. The
fake NPU counts every device-to-host transfer and every upload, so "a call never waits for the
device" is a number here.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Iterator
from typing import Any

import fake_npu
import pytest
import safe_reference
import torch
from block_cases import BlockCase, block_cases
from calls import BlockCopyArgs, KvCacheArgs, PagedLoadArgs
from cases import (
    ND,
    Case,
    IndexPutRecorder,
    bits_equal,
    cloned,
    empty_calls,
    garbage_kv_args,
    garbage_paged_args,
    kv_cache_cases,
    paged_case,
    paged_cases,
    random_bits,
    reshape_and_cache_case,
    reshape_and_cache_cases,
)
from hypothesis import given
from hypothesis import strategies as st

import ascend_kv
from ascend_kv.backends import npu, sim
from ascend_kv.dispatch import policy
from ascend_kv.tools import reference

SUPPORTED, UNSUPPORTED = "Ascend910B3", "Ascend310P3"
fake_npu.install()  # at import: the tests below are parametrised over its device
NPU = torch.device("npu", 0)


@pytest.fixture(scope="module")
def kernel_library() -> Iterator[None]:
    """The kernels' host build as the NPU kernel library."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(npu.LIBRARY_ENV, str(sim.library_path()))
        npu.library.cache_clear()
        yield
    npu.library.cache_clear()


#: Positions in torch.ops.ascend_kv._runs(): where the operators' calls ran.
KERNELS, DEVICE_FALLBACK = 2, 3


@pytest.fixture(params=[SUPPORTED, UNSUPPORTED])
def soc(request: pytest.FixtureRequest, kernel_library: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test on an A2 part, where only the kernels may run, and on a 310P part, where only the
    device fallback may."""
    monkeypatch.setenv("ASCEND_KV_SOC", request.param)
    policy.forget()
    barred = DEVICE_FALLBACK if request.param == SUPPORTED else KERNELS
    before = torch.ops.ascend_kv._runs()[barred]
    yield str(request.param)
    assert torch.ops.ascend_kv._runs()[barred] == before, f"{'device fallback' if barred == DEVICE_FALLBACK else 'kernels'} ran"
    policy.forget()


def to(case: Case, data: torch.device, index: torch.device) -> Case:
    """``case`` with its data tensors on ``data`` and its index tensors on ``index``."""
    data_names = {"key", "value"}

    def move(name: str | int, value: Any, is_data: bool) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        return value.to(data if is_data else index)

    if len(case.args) == 5:  # kv_cache(new_kv, layer_id, past, token_offset, seq_len)
        args = tuple(move(i, a, i in (0, 2)) for i, a in enumerate(case.args))
    else:                     # paged_cache_load(key_cache, value_cache, block_table, context_lens)
        args = tuple(move(i, a, i < 2) for i, a in enumerate(case.args))
    kwargs = {k: move(k, v, k in data_names) for k, v in case.kwargs.items()}
    return Case(args, kwargs)


def expected_backend_warnings(soc: str) -> int:
    return 0 if soc == SUPPORTED else 1


def run(op: Any, case: Case) -> tuple[Any, fake_npu.Counts, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught, fake_npu.counting() as seen:
        warnings.simplefilter("always")
        result = op(*case.args, **case.kwargs)
    return result, seen, [w for w in caught if issubclass(w.category, ascend_kv.FallbackWarning)]


def host(t: torch.Tensor) -> torch.Tensor:
    """A device tensor's values on the host (a transfer: only outside the counted calls)."""
    return t.cpu()


# ----------------------------------------------------------------------------- in domain, no host reads


@pytest.mark.parametrize("index_on", ["device", "host"])
@given(case=kv_cache_cases())
def test_kv_cache_on_the_npu_matches_the_reference_and_reads_nothing_back(
    soc: str, index_on: str, case: Case
) -> None:
    expected = reference.kv_cache(*case.cloned().args)
    on_npu = to(case, NPU, NPU if index_on == "device" else torch.device("cpu"))
    result, seen, fallbacks = run(ascend_kv.kv_cache, on_npu)
    assert result is on_npu.args[2]
    assert bits_equal(host(result), expected)
    assert seen.transfers == 0
    index_on_host = [t for t in (on_npu.args[1], *on_npu.args[3:]) if isinstance(t, torch.Tensor) and t.is_cpu]
    assert seen.uploads == (1 if sum(t.numel() for t in index_on_host) else 0)  # one copy, pinned:
    assert seen.blocking_uploads == 0
    assert len(fallbacks) <= expected_backend_warnings(soc)


@pytest.mark.parametrize("index_on", ["device", "host"])
@given(case=paged_cases())
def test_paged_cache_load_on_the_npu_matches_the_reference_and_reads_nothing_back(
    soc: str, index_on: str, case: Case
) -> None:
    expected = reference.paged_cache_load(*case.cloned().args, **case.cloned().kwargs)
    on_npu = to(case, NPU, NPU if index_on == "device" else torch.device("cpu"))
    result, seen, fallbacks = run(ascend_kv.paged_cache_load, on_npu)
    assert all(r.device == NPU for r in result)
    assert all(bits_equal(host(r), e) for r, e in zip(result, expected))
    allocating = "key" not in case.kwargs
    # The allocating form learns its row count from device context_lens: its one documented read.
    assert seen.transfers == (1 if allocating and index_on == "device" else 0)
    assert seen.blocking_uploads == 0
    assert len(fallbacks) <= expected_backend_warnings(soc)


@pytest.mark.parametrize("index_on", ["device", "host"])
@given(case=reshape_and_cache_cases())
def test_reshape_and_cache_on_the_npu_matches_the_reference_and_reads_nothing_back(
    soc: str, index_on: str, case: Case
) -> None:
    expected = reference.reshape_and_cache(*case.cloned().args, **case.kwargs)
    moved = [None if t is None else t.to(NPU) for t in case.args[:4]]
    slots = case.args[4].to(NPU if index_on == "device" else torch.device("cpu"))
    on_npu = Case((*moved, slots), case.kwargs)
    result, seen, fallbacks = run(ascend_kv.reshape_and_cache, on_npu)
    assert result[0] is moved[2] and result[1] is moved[3]
    assert bits_equal(host(result[0]), expected[0])
    assert result[1] is None or bits_equal(host(result[1]), expected[1])
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    assert seen.uploads == (1 if index_on == "host" and slots.numel() else 0)
    assert len(fallbacks) <= expected_backend_warnings(soc)


def test_unsupported_soc_runs_the_fallback_on_the_npu_with_one_warning(soc: str) -> None:
    case = to(paged_case(ND, [20, 3], give_outputs=True), NPU, NPU)
    expected = reference.paged_cache_load(*[host(t) for t in case.args],
                                          **{k: host(v) if isinstance(v, torch.Tensor) else v
                                             for k, v in case.kwargs.items()})
    for call in range(3):
        _, seen, fallbacks = run(ascend_kv.paged_cache_load, case)
        assert seen.transfers == 0
        assert len(fallbacks) == (expected_backend_warnings(soc) if call == 0 else 0)  # once per reason
    assert all(bits_equal(host(o), e) for o, e in zip((case.kwargs["key"], case.kwargs["value"]), expected))
    decision = ascend_kv.explain("paged_cache_load", NPU)
    assert decision.backend == ("npu" if soc == SUPPORTED else "fallback") and decision.soc == soc
    if soc == UNSUPPORTED:
        assert "atlas-inference" == decision.product_line


# ----------------------------------------------------------------------------- out of range: nothing outside


def on_npu_args(args: KvCacheArgs | PagedLoadArgs) -> Any:
    return type(args)(**{k: v.to(NPU) if isinstance(v, torch.Tensor) else v for k, v in vars(args).items()})


@given(args=garbage_kv_args())
def test_kv_cache_garbage_device_indices_touch_nothing_outside(soc: str, args: KvCacheArgs) -> None:
    """Past is a window of a wider buffer: the bytes around it never change; inside, the safe semantics."""
    if not isinstance(args.layer_id, torch.Tensor):  # an int layer is a host value, always checked
        args = dataclasses.replace(args, layer_id=torch.tensor([args.layer_id], dtype=args.seq_len.dtype))
    expected = cloned(args)
    safe_reference.kv_cache(expected)
    buffer = random_bits((args.past.numel() + 64,), args.past.dtype, 5)
    window = buffer[32 : 32 + args.past.numel()].view(args.past.shape)
    window.copy_(args.past)
    on_device = on_npu_args(dataclasses.replace(args, past=window))
    device_buffer = buffer.to(NPU)
    past = device_buffer[32 : 32 + args.past.numel()].view(args.past.shape)
    with fake_npu.counting() as seen, warnings.catch_warnings():
        warnings.simplefilter("ignore", ascend_kv.FallbackWarning)
        ascend_kv.kv_cache(on_device.new_kv, on_device.layer_id, past, on_device.token_offset, on_device.seq_len)
    assert seen.transfers == 0
    after = host(device_buffer)
    assert bits_equal(after[:32], buffer[:32]) and bits_equal(after[32 + args.past.numel():], buffer[32 + args.past.numel():])
    assert bits_equal(after[32 : 32 + args.past.numel()].view(args.past.shape), expected.past)


@given(args=garbage_paged_args())
def test_paged_garbage_device_indices_follow_the_safe_semantics(soc: str, args: PagedLoadArgs) -> None:
    expected = cloned(args)
    safe_reference.paged_cache_load(expected)
    on_device = on_npu_args(args)
    with fake_npu.counting() as seen, warnings.catch_warnings():
        warnings.simplefilter("ignore", ascend_kv.FallbackWarning)
        ascend_kv.paged_cache_load(
            on_device.key_cache, on_device.value_cache, on_device.block_table, on_device.context_lens,
            kv_cache_cfg=on_device.layout, cumsum=on_device.cumsum, seq_starts=on_device.seq_starts,
            key=on_device.key, value=on_device.value)
    assert seen.transfers == 0
    if args.cumsum and not bool((args.context_lens[1:] >= args.context_lens[:-1]).all()):
        return  # rows several entries write: which entry lands differs by backend (tests of each cover it)
    assert bits_equal(host(on_device.key), expected.key) and bits_equal(host(on_device.value), expected.value)


def test_full_validation_raises_the_host_errors_and_writes_nothing(soc: str, monkeypatch: pytest.MonkeyPatch) -> None:
    case = paged_case(ND, [20, 3], give_outputs=True)
    bad = Case((*case.args[:3], torch.tensor([20, 99], dtype=torch.int32)), case.kwargs)
    with pytest.raises(ValueError) as on_host:
        ascend_kv.paged_cache_load(*bad.cloned().args, **bad.cloned().kwargs)
    on_npu = to(bad, NPU, NPU)
    before = [host(on_npu.kwargs[k]) for k in ("key", "value")]
    for switch in ("context", "environment"):
        with fake_npu.counting() as seen, pytest.raises(ValueError) as on_device:
            if switch == "context":
                with ascend_kv.validate("full"):
                    ascend_kv.paged_cache_load(*on_npu.args, **on_npu.kwargs)
            else:
                monkeypatch.setenv("ASCEND_KV_VALIDATE", "full")
                ascend_kv.dispatch.validation.environment_mode.cache_clear()
                try:
                    ascend_kv.paged_cache_load(*on_npu.args, **on_npu.kwargs)
                finally:
                    ascend_kv.dispatch.validation.environment_mode.cache_clear()
        assert str(on_device.value) == str(on_host.value)
        assert seen.transfers == 1  # every index value, in one read
    assert all(bits_equal(host(on_npu.kwargs[k]), b) for k, b in zip(("key", "value"), before))


def test_kv_cache_full_validation_names_the_bad_tensor_layer(soc: str) -> None:
    case = kv_cache_case_on_npu()
    with ascend_kv.validate("full"), pytest.raises(ValueError, match=r"layer_id = 7 must be in \[0, 2\)"):
        ascend_kv.kv_cache(case.args[0], torch.tensor([7], device=NPU), *case.args[2:])


def kv_cache_case_on_npu() -> Case:
    from cases import kv_cache_case

    return to(kv_cache_case(torch.float16, [2, 1], [2, 9]), NPU, NPU)


# ----------------------------------------------------------------------------- strided caches, formats, binding


def test_mla_column_slices_and_block_interleaved_kv_run_in_place_on_the_kernels(soc: str) -> None:
    num_blocks, block_size = 4, 16
    latent = random_bits((num_blocks, block_size, 1, 576), torch.float16, 1)
    fused = random_bits((num_blocks, 2, block_size, 2, 16), torch.bfloat16, 2)
    table = torch.tensor([[2, 0], [3, -1]], dtype=torch.int32)
    lens = torch.tensor([20, 9], dtype=torch.int32)
    warned = 0
    for key_cache, value_cache in ((latent[..., :512], latent[..., 512:]), (fused[:, 0], fused[:, 1])):
        expected = reference.paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg=ND)
        buffer = (latent if key_cache.dtype == torch.float16 else fused).to(NPU)
        views = ((buffer[..., :512], buffer[..., 512:]) if buffer.dim() == 4 else (buffer[:, 0], buffer[:, 1]))
        assert not views[0].is_contiguous()
        result, seen, fallbacks = run(ascend_kv.paged_cache_load, Case((*views, table.to(NPU), lens.to(NPU)),
                                                                       {"kv_cache_cfg": "nd"}))
        assert seen.transfers == 1  # the allocating form's row count
        warned += len(fallbacks)
        assert all(bits_equal(host(r), e) for r, e in zip(result, expected))
        new_kv = random_bits((3, 512), torch.float16, 3)
        if key_cache.dtype == torch.float16:  # kv_cache into the latent part of the fused [.., 576] buffer
            past = buffer[..., :512].reshape(1, num_blocks, block_size, 512)
            want = reference.kv_cache(new_kv, 0, host(buffer)[..., :512].reshape(1, num_blocks, block_size, 512).clone(),
                                      torch.tensor([5, 16, 2, 0]), torch.tensor([1, 1, 1, 0]))
            result, seen, _ = run(ascend_kv.kv_cache, Case((new_kv.to(NPU), 0, past, torch.tensor([5, 16, 2, 0]),
                                                             torch.tensor([1, 1, 1, 0]))))
            assert seen.transfers == 0 and bits_equal(host(buffer)[..., :512].reshape(want.shape), want)
            assert bits_equal(host(buffer)[..., 512:], latent[..., 512:])  # the rope part untouched
    assert warned == expected_backend_warnings(soc)  # strided caches stay on the kernels where they run


def test_private_storage_format_is_rejected_on_every_npu_path(soc: str) -> None:
    """FRACTAL_NZ is refused where the call takes the tensor as ND (NZ caches: tests/test_torch_npu_facade.py)."""
    case = to(paged_case(ND, [16, 3], give_outputs=True), NPU, NPU)
    fake_npu.set_storage_format(case.args[0], fake_npu.FORMAT_FRACTAL_NZ)
    try:
        with pytest.raises(ValueError, match="key_cache is stored in the NPU's private format FRACTAL_NZ"):
            ascend_kv.paged_cache_load(*case.args, **case.kwargs)
    finally:
        fake_npu.set_storage_format(case.args[0], fake_npu.FORMAT_ND)


def test_explicit_npu_on_an_unsupported_soc_is_an_error(soc: str) -> None:
    case = kv_cache_case_on_npu()
    with ascend_kv.use_backend("npu"):
        if soc == SUPPORTED:
            ascend_kv.kv_cache(*case.args)
        else:
            with pytest.raises(ascend_kv.BackendUnavailableError, match="do not support KVCacheOperation"):
                ascend_kv.kv_cache(*case.args)


def test_the_operator_checks_every_tensor_of_an_npu_call(kernel_library: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel library takes its tensors unchecked: the operator's rules refuse a bad call on the NPU
    path before any backend runs, naming the tensor, and write nothing."""
    monkeypatch.setenv("ASCEND_KV_SOC", SUPPORTED)
    policy.forget()
    case = to(paged_case(ND, [20, 3], give_outputs=True), NPU, NPU)
    key_cache, value_cache, table, lens = case.args
    key, value = case.kwargs["key"], case.kwargs["value"]
    before, runs = host(key).clone(), torch.ops.ascend_kv._runs()
    for error, message, call in (
        (ValueError, "value_cache.shape[0] (num_blocks) = 3 must equal key_cache.shape[0] = 8",
         (key_cache, value_cache[:3], table, lens, key, value)),
        (TypeError, "block_table must have dtype int32 or int64, got float32", (key_cache, value_cache, table.float(),
                                                                                lens, key, value)),
        (ValueError, "key is written in place, so each element needs its own memory",
         (key_cache, value_cache, table, lens, key[:1].expand(key.shape), value)),
        (ValueError, "context_lens must be a 1-D tensor [batch], got shape (2, 1)",
         (key_cache, value_cache, table, lens[:, None], key, value)),
    ):
        with pytest.raises(error, match=re.escape(message)):
            ascend_kv.paged_cache_load(*call[:4], kv_cache_cfg=ND, key=call[4], value=call[5])
    assert bits_equal(host(key), before)  # a refused call wrote nothing
    assert torch.ops.ascend_kv._runs() == runs  # and ran nowhere
    policy.forget()


@pytest.mark.parametrize("name", sorted(empty_calls()))
def test_an_empty_call_is_a_no_op_on_the_npu(soc: str, name: str) -> None:
    """Empty tensors with strides outside the kernels' domain: the kernels take the call where they
    run (the device fallback is barred there), nothing is read back, every tensor keeps its bits."""
    operation, case = empty_calls()[name]
    expected = case.cloned()
    getattr(reference, operation)(*expected.args, **expected.kwargs)
    on_npu = Case(tuple(t.to(NPU) if isinstance(t, torch.Tensor) else t for t in case.args),
                  {k: t.to(NPU) if isinstance(t, torch.Tensor) else t for k, t in case.kwargs.items()})
    assert [t.stride() for t in on_npu.tensors()] == [t.stride() for t in case.tensors()]
    _, seen, fallbacks = run(getattr(ascend_kv, operation), on_npu)
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    assert len(fallbacks) <= expected_backend_warnings(soc)
    assert all(bits_equal(host(got), want) for got, want in zip(on_npu.tensors(), expected.tensors()))


# ----------------------------------------------------------------------------- a call that names nothing writes nothing


@pytest.mark.parametrize("layout", ["nd", "nz"])
def test_a_padding_only_write_on_the_device_fallback_changes_no_byte(kernel_library: None, layout: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """On a 310P part (the device fallback), a reshape_and_cache whose slots are all padding or out of
    range adds zero everywhere: no slot, not even (0, 0), is rewritten with bytes read earlier."""
    monkeypatch.setenv("ASCEND_KV_SOC", UNSUPPORTED)
    policy.forget()
    case = to(reshape_and_cache_case(layout, [-1, -1, -7], num_tokens=3), NPU, NPU)
    before = [host(t) for t in case.args[2:4]]
    recorder = IndexPutRecorder()  # the writes the device runs: the fallback's, inside the C++ operator
    with warnings.catch_warnings(), fake_npu.recording("aten::_index_put_impl_") as calls:
        warnings.simplefilter("ignore", ascend_kv.FallbackWarning)
        ascend_kv.reshape_and_cache(*case.args, **case.kwargs)
    recorder.calls = [(indices, values, accumulate) for _, indices, values, accumulate, *_ in (c.args for c in calls)]
    assert recorder.calls, "the device fallback did not run"
    recorder.require_no_change()
    assert all(bits_equal(host(t), b) for t, b in zip(case.args[2:4], before))
    policy.forget()


# ----------------------------------------------------------------------------- block copies


def host_launches() -> int:
    """Kernel launches of the host build (the kernel library here)."""
    return int(torch.ops.ascend_kv_host.launches())


@pytest.mark.parametrize("index_on", ["device", "host"])
@given(case=block_cases())
def test_block_copy_on_the_npu_matches_the_reference_and_reads_nothing_back(
    soc: str, index_on: str, case: BlockCase
) -> None:
    expected = case.cloned_args()
    reference.block_copy(*expected)
    key, value, *index = case.args()
    caches = [key.to(NPU), None if value is None else value.to(NPU)]
    index = [t.to(NPU if index_on == "device" else torch.device("cpu")) for t in index]
    result, seen, fallbacks = run(ascend_kv.block_copy, Case((*caches, *index)))
    assert result is None
    assert bits_equal(host(caches[0]), expected[0])
    assert caches[1] is None or bits_equal(host(caches[1]), expected[1])
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    assert seen.uploads == (1 if index_on == "host" and sum(t.numel() for t in index) else 0)
    assert len(fallbacks) <= expected_backend_warnings(soc)


def test_copy_blocks_over_32_layers_is_one_kernel_launch_on_the_npu(soc: str) -> None:
    buf = random_bits((32, 2, 10, 16, 2, 16), torch.bfloat16, 7)           # vLLM: kv[layer][0] / [1]
    mapping = torch.tensor([[0, 7], [0, 8], [3, 9]], dtype=torch.int32)
    expected = buf.clone()
    reference.copy_blocks([expected[i, 0] for i in range(32)], [expected[i, 1] for i in range(32)], mapping)
    on_npu = buf.to(NPU)
    keys, values = [on_npu[i, 0] for i in range(32)], [on_npu[i, 1] for i in range(32)]
    for mapping_on in (NPU, torch.device("cpu")):
        before = host_launches()
        _, seen, _ = run(ascend_kv.copy_blocks, Case((keys, values, mapping.to(mapping_on))))
        assert host_launches() - before == (1 if soc == SUPPORTED else 0)   # the fallback launches nothing
        assert seen.transfers == 0 and seen.blocking_uploads == 0
        assert bits_equal(host(on_npu), expected)


@st.composite
def garbage_block_copy_args(draw: st.DrawFn) -> BlockCopyArgs:
    """Index values nobody checked, all out of range or independent copies (see test_sim_block_copy)."""
    num_blocks = draw(st.integers(1, 6))
    values = st.one_of(st.integers(-3, num_blocks + 2), st.sampled_from([-(2**63), 2**63 - 1, 2**31]))
    sources = draw(st.lists(values, max_size=4))
    ends = sorted(draw(st.lists(st.integers(-2, 8), min_size=len(sources), max_size=len(sources))))
    used = {v for v in sources if 0 <= v < num_blocks}
    destinations = draw(st.lists(values.filter(lambda d: not 0 <= d < num_blocks or d not in used), max_size=6,
                                 unique_by=lambda d: d if 0 <= d < num_blocks else object()))
    cache = random_bits((num_blocks, 3, 16), torch.float16, draw(st.integers(0, 99)))
    index = [torch.tensor(v, dtype=torch.int64) for v in (sources, destinations, ends)]
    return BlockCopyArgs((cache,), *index)


@given(args=garbage_block_copy_args())
def test_block_copy_garbage_device_indices_are_skipped(soc: str, args: BlockCopyArgs) -> None:
    (cache,), sources, destinations, ends = args.caches, args.src.tolist(), args.dst.tolist(), args.cum_sum.tolist()
    expected = cache.clone()
    for j, d in enumerate(destinations):
        i = next((i for i, e in enumerate(ends) if e > j), len(sources))
        if i < len(sources) and 0 <= sources[i] < cache.shape[0] and 0 <= d < cache.shape[0]:
            expected[d] = cache[sources[i]]
    on_npu = cache.to(NPU)
    index = [t.to(NPU) for t in (args.src, args.dst, args.cum_sum)]
    _, seen, _ = run(torch.ops.ascend_kv.block_copy, Case((on_npu, None, *index)))
    assert seen.transfers == 0
    assert bits_equal(host(on_npu), expected)


def cross_device_copies(call: Any) -> list[bool]:
    """``non_blocking`` of each copy between devices that ``call()`` makes (the device records its
    copies: a dispatch mode would see the operator, not the copies inside it)."""
    with fake_npu.recording("aten::_copy_from") as copies:
        call()
    return [bool(c.args[2]) for c in copies if c.devices[0] != c.devices[1]]


def test_swap_blocks_between_pinned_host_memory_and_the_npu_never_waits(soc: str) -> None:
    """Offload: out to pinned host blocks (one non-blocking copy per run of destinations: the one transfer
    counted), back in from pinned memory (non-blocking uploads, no transfer); the same bytes return."""
    cache = random_bits((8, 16, 2, 16), torch.float16, 8).to(NPU)
    original = host(cache)
    offloaded = torch.empty((3, 16, 2, 16), dtype=torch.float16, pin_memory=True)
    out_mapping, in_mapping = torch.tensor([[5, 0], [6, 1], [2, 2]]), torch.tensor([[0, 1], [1, 3], [2, 7]])
    _, out, _ = run(ascend_kv.swap_blocks, Case((cache, offloaded, out_mapping)))
    assert out.transfers == 1                                              # one run: host blocks 0, 1, 2
    assert bits_equal(offloaded, original[[5, 6, 2]])
    _, back, _ = run(ascend_kv.swap_blocks, Case((offloaded, cache, in_mapping)))
    assert back.transfers == 0 and back.blocking_uploads == 0
    expected = original.clone()
    expected[[1, 3, 7]] = original[[5, 6, 2]]
    assert bits_equal(host(cache), expected)
    for src, dst, mapping in ((cache, offloaded, out_mapping), (offloaded, cache, in_mapping)):
        flags = cross_device_copies(lambda src=src, dst=dst, mapping=mapping: ascend_kv.swap_blocks(src, dst, mapping))
        assert flags and all(flags)


@pytest.mark.parametrize("target", ["npu:0", "npu:1"])
def test_swap_blocks_on_one_npu_and_between_two_reads_nothing_back(soc: str, target: str) -> None:
    source = random_bits((6, 16, 2, 16), torch.bfloat16, 9)
    destination = random_bits((4, 16, 2, 16), torch.bfloat16, 10)
    mapping = torch.tensor([[5, 3], [0, 0], [2, 1]], dtype=torch.int32)
    expected = destination.clone()
    reference.swap_blocks(source, expected, mapping)
    src, dst = source.to(NPU), destination.to(target)
    _, seen, _ = run(ascend_kv.swap_blocks, Case((src, dst, mapping)))
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    assert bits_equal(host(dst), expected)
