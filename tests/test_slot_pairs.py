"""Slot pairs (docs/semantics.md §15.2): reshape_and_cache and its quantizing overload with slot_mapping
as [n, 2] (block, offset) pairs write exactly what the flat slots write, on every backend; the pair
rules at their boundaries; the DSA indexer write as one call, byte-equal to vllm-ascend's three
launches written with plain torch ops.
"""

from __future__ import annotations

import npu_fixtures
import pytest
import torch
from cases import Case, bits_equal, reshape_and_cache_cases
from hypothesis import assume, given
from hypothesis import strategies as st
from npu_fixtures import NPU, SUPPORTED, run

import ascend_kv

OPS = torch.ops.ascend_kv
kernel_library, soc = npu_fixtures.kernel_library, npu_fixtures.soc  # the fake NPU's route (fixtures)


def block_size_of(case: Case) -> int:
    cache = case.args[2]
    return cache.shape[1] if case.kwargs["kv_cache_cfg"] == "nd" else cache.shape[2]


def as_pairs(slots: torch.Tensor, block_size: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The (block, offset) pairs of flat slots; padding as a pair with one negative component, in turn (-1, 3), (0, -1)."""
    s = slots.to(torch.int64)
    pairs = torch.stack([torch.div(s, block_size, rounding_mode="floor"), s.remainder(block_size)], dim=1)
    padding = (s < 0).nonzero().flatten().tolist()
    for k, i in enumerate(padding):
        pairs[i] = torch.tensor([-1, 3] if k % 2 == 0 else [0, -1])
    return pairs.to(slots.dtype if dtype is None else dtype)


def with_slots(case: Case, slots: torch.Tensor) -> Case:
    return Case((*case.args[:4], slots), dict(case.kwargs))


def written(case: Case) -> list[torch.Tensor]:
    return [case.args[2], *([case.args[3]] if case.args[3] is not None else [])]


def flat_result(case: Case) -> list[torch.Tensor]:
    """The caches after the call with flat slots, on the host."""
    flat = case.cloned()
    ascend_kv.reshape_and_cache(*flat.args, **flat.kwargs)
    return written(flat)


def pairs_call(case: Case, device: torch.device | str = "cpu", index_device: torch.device | str | None = None) -> Case:
    """The call with (block, offset) pairs, its tensors on ``device`` (the pairs on ``index_device``)."""
    pairs = as_pairs(case.args[4], block_size_of(case)).to(device if index_device is None else index_device)
    moved = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in case.cloned().args[:4])
    return Case((*moved, pairs), dict(case.kwargs))


def same_caches(got: list[torch.Tensor], want: list[torch.Tensor]) -> bool:
    return all(bits_equal(g.cpu(), w) for g, w in zip(got, want))


@given(case=reshape_and_cache_cases())
def test_pairs_write_what_the_flat_slots_write_on_the_host(backend: str, case: Case) -> None:
    call = pairs_call(case)
    ascend_kv.reshape_and_cache(*call.args, **call.kwargs)
    assert same_caches(written(call), flat_result(case))


@pytest.mark.parametrize("cores", [1, 3, 40])
@given(case=reshape_and_cache_cases())
def test_pairs_through_the_kernel_at_every_core_count(monkeypatch: pytest.MonkeyPatch, cores: int,
                                                      case: Case) -> None:
    monkeypatch.setenv("ASCEND_KV_SIM_CORES", str(cores))
    call = pairs_call(case)
    with ascend_kv.use_backend("sim"):
        ascend_kv.reshape_and_cache(*call.args, **call.kwargs)
    assert same_caches(written(call), flat_result(case))


@pytest.mark.parametrize("index_on", ["device", "host"])
@given(case=reshape_and_cache_cases())
def test_pairs_on_the_npu_read_nothing_back(soc: str, index_on: str, case: Case) -> None:
    assume(case.kwargs["kv_cache_cfg"] == "nd")
    call = pairs_call(case, NPU, NPU if index_on == "device" else "cpu")
    seen = run(lambda: ascend_kv.reshape_and_cache(*call.args, **call.kwargs))
    assert seen.transfers == 0
    assert seen.launches == (1 if soc == SUPPORTED and len(case.args[4]) and case.args[0].numel() else 0)
    assert same_caches(written(call), flat_result(case))


@given(case=reshape_and_cache_cases(), index=st.sampled_from([torch.int32, torch.int64]))
def test_int32_and_int64_pairs_write_the_same(case: Case, index: torch.dtype) -> None:
    results = []
    for dtype in (index, torch.int64 if index == torch.int32 else torch.int32):
        call = with_slots(case.cloned(), as_pairs(case.args[4], block_size_of(case), dtype))
        ascend_kv.reshape_and_cache(*call.args, **call.kwargs)
        results.append(written(call))
    assert all(bits_equal(a, b) for a, b in zip(*results))


@st.composite
def garbage_pairs(draw: st.DrawFn) -> list[list[int]]:
    values = st.one_of(st.integers(-2, 5), st.sampled_from([-(2**63), 2**63 - 1, 2**31, 2**32 + 1]))
    n = draw(st.integers(0, 6))
    return draw(st.lists(st.lists(values, min_size=2, max_size=2), min_size=n, max_size=n))


@given(pairs=garbage_pairs())
def test_device_pairs_outside_the_caches_are_skipped(soc: str, pairs: list[list[int]]) -> None:
    """An offset past its block never lands in the next one; nothing is read back."""
    cache = torch.arange(3 * 4 * 1 * 8, dtype=torch.float16).reshape(3, 4, 1, 8)
    key = -torch.arange(len(pairs) * 8, dtype=torch.float16).reshape(len(pairs), 1, 8) - 1
    want = cache.clone()
    for i, (b, o) in enumerate(pairs):
        if 0 <= b < 3 and 0 <= o < 4:
            want[b, o] = key[i]
    on_npu = cache.to(NPU)
    index = torch.tensor(pairs, dtype=torch.int64).reshape(len(pairs), 2).to(NPU)
    seen = run(lambda: ascend_kv.reshape_and_cache(key.to(NPU), None, on_npu, None, index))
    assert seen.transfers == 0
    assert bits_equal(on_npu.cpu(), want)


def test_pair_rules_at_their_boundaries_write_nothing() -> None:
    cache = torch.zeros(3, 4, 1, 8)  # num_blocks 3, block_size 4
    key = torch.ones(2, 1, 8)
    t = torch.tensor
    cases = [
        (t([[2, 3]]), None),                                                              # the last slot
        (t([[2, 4]]), r"slot_mapping\[0\] = \(2, 4\) is out of range: \(num_blocks, block_size\) = \(3, 4\)"),
        (t([[3, 0]]), r"slot_mapping\[0\] = \(3, 0\) is out of range"),
        (t([[-1, 4], [0, -7]]), None),                                                    # padding
        (t([[0, 0], [0, 4]]), r"slot_mapping\[1\] = \(0, 4\)"),                           # nothing written
        (t([[0, 0, 0]]), r"slot_mapping must be \[n\] flat slots or \[n, 2\] \(block, offset\) pairs"),
        (t([[[0, 0]]]), r"slot_mapping must be \[n\] flat slots or \[n, 2\]"),
        (t([[0, 0], [0, 1], [0, 2]]), r"slot_mapping has 3 entries, more than num_tokens = 2"),
    ]
    for slots, error in cases:
        if error is None:
            ascend_kv.reshape_and_cache(key, None, cache.clone(), None, slots)
            continue
        with pytest.raises(ValueError, match=error):
            ascend_kv.reshape_and_cache(key, None, cache, None, slots)
        assert cache.count_nonzero() == 0, f"{slots} wrote"


# ----------------------------------------------------------------------------- the DSA indexer write


def dynamic_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch_npu's npu_dynamic_quant of ``x`` [..., D] to int8, in plain torch: codes and float32 scales [...]."""
    f = x.float()
    amax = f.abs().amax(-1, keepdim=True)
    q = torch.nan_to_num(torch.round(f * (torch.tensor(127.0) / amax)), nan=0.0).clamp(-128, 127).to(torch.int8)
    return q, (amax * torch.tensor(1 / 127, dtype=torch.float32)).squeeze(-1)


def three_launches(k: torch.Tensor, k_cache: torch.Tensor, scale_cache: torch.Tensor, pairs: torch.Tensor) -> None:
    """vllm-ascend's indexer write on A2/A3: npu_dynamic_quant, then a scatter of the codes and one of the
    float16 scales, at (block, offset) pairs (here as plain torch ops, in order)."""
    q, s = dynamic_int8(k)
    for i, (b, o) in enumerate(pairs.tolist()):
        if b >= 0 and o >= 0:
            k_cache[b, o, 0] = q[i]
            scale_cache[b, o, 0, 0] = s[i].to(torch.float16)


@pytest.mark.parametrize("device", ["cpu", "npu"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_dsa_indexer_write_is_one_call(kernel_library: None, device: str, dtype: torch.dtype) -> None:
    n, d, nb, bs = 9, 128, 4, 16
    g = torch.Generator().manual_seed(3)
    k = (torch.randn(n, d, generator=g) * 4).to(dtype)
    k[2] = 0  # an all-zero row: zero codes, scale 0
    pairs = torch.tensor([[1, 3], [0, 0], [3, 15], [-1, -1], [2, 7], [1, 4], [0, 15], [3, 0], [-1, 2]],
                         dtype=torch.int32)
    k_cache = torch.randint(-100, 100, (nb, bs, 1, d), dtype=torch.int8, generator=g)
    scale_cache = torch.full((nb, bs, 1, 1), -7.0, dtype=torch.float16)
    want = [k_cache.clone(), scale_cache.clone()]
    three_launches(k, *want, pairs)
    on = NPU if device == "npu" else "cpu"
    got = [k_cache.to(on), scale_cache.to(on)]
    seen = run(lambda: ascend_kv.reshape_and_cache(k.view(n, 1, d).to(on), None, got[0], None, pairs.to(on),
                                                   k_scale_cache=got[1]))
    assert seen.transfers == 0
    assert bits_equal(got[0].cpu(), want[0]) and bits_equal(got[1].cpu(), want[1])


# ----------------------------------------------------------------------------- graphs


def _step(key_cache: torch.Tensor, value_cache: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
          pairs: torch.Tensor) -> None:
    ascend_kv.reshape_and_cache(key, value, key_cache, value_cache, pairs)



@pytest.mark.parametrize("dynamic", [None, True])
def test_compiled_pairs_equal_eager(fresh_compile: None, dynamic: bool | None) -> None:
    compiled = torch.compile(_step, backend="inductor", fullgraph=True, dynamic=dynamic)
    for n in (1, 3, 2):
        g = torch.Generator().manual_seed(n)
        caches = [torch.randn(4, 8, 2, 16, generator=g) for _ in range(2)]
        key, value = torch.randn(n + 1, 2, 16, generator=g), torch.randn(n + 1, 2, 16, generator=g)
        pairs = torch.stack([torch.arange(n) % 4, torch.arange(n) * 3 % 8], dim=1)
        pairs[0, 0] = -1
        eager, ran = [c.clone() for c in caches], [c.clone() for c in caches]
        _step(*eager, key, value, pairs)
        compiled(*ran, key, value, pairs)
        assert all(bits_equal(r, e) for r, e in zip(ran, eager)), f"{n} tokens"


def test_pairs_pass_opcheck() -> None:
    caches = [torch.randn(3, 4, 2, 8) for _ in range(2)]
    key, value = torch.randn(3, 2, 8), torch.randn(3, 2, 8)
    torch.library.opcheck(OPS.reshape_and_cache.default, (key, value, *caches, torch.tensor([[0, 1], [-1, 0], [2, 3]])))
    scale = torch.zeros(3, 4, 2)
    torch.library.opcheck(OPS.reshape_and_cache.quant,
                          (key, None, torch.zeros(3, 4, 2, 8, dtype=torch.int8), None,
                           torch.tensor([[0, 1], [2, 3]], dtype=torch.int32), "nd", None, None, None, scale, None,
                           None, None, None))
