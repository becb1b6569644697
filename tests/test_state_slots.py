"""copy_state_slots (docs/semantics.md §14.1) through the public function: every backend bit for bit
against the plain reference, its rules at their boundaries, its temporaries, compiled and eager.

States come in the layouts serving engines allocate (tests/state_cases.py): views into padded
pages, per-layer views of one buffer, transposed inner dims, 1-D and empty slots, every element
width. Every byte of the bases is compared, so bytes outside the states (page padding) must not change.
"""

from __future__ import annotations

import doctest
import types

import fake_npu
import npu_fixtures
import pytest
import torch
from cases import bits_equal
from hypothesis import given
from hypothesis import strategies as st
from npu_fixtures import NPU, SUPPORTED, run
from state_cases import SlotPairs, StateLayout, slot_pairs, state_layouts

import ascend_kv
from ascend_kv.api import state_ops, swap_batch
from ascend_kv.tools import reference

OPS = torch.ops.ascend_kv
kernel_library, soc = npu_fixtures.kernel_library, npu_fixtures.soc  # the fake NPU's route (fixtures)


@st.composite
def copies(draw: st.DrawFn) -> tuple[StateLayout, SlotPairs]:
    layout = draw(state_layouts())
    return layout, draw(slot_pairs(layout.num_slots))


def expected(layout: StateLayout, pairs: SlotPairs) -> list[torch.Tensor]:
    """The bases after the reference's copies (on the host)."""
    bases = [b.cpu() for b in layout.cloned()]
    reference.copy_state_slots(layout.states(bases), *pairs.tensors(), pairs.simultaneous)
    return bases


def bases_equal(got: list[torch.Tensor], want: list[torch.Tensor]) -> bool:
    return all(bits_equal(g.cpu(), w) for g, w in zip(got, want))


# ----------------------------------------------------------------------------- the host paths and the sim


@given(case=copies())
def test_matches_the_reference_on_the_host(backend: str, case: tuple[StateLayout, SlotPairs]) -> None:
    layout, pairs = case
    want = expected(layout, pairs)
    ascend_kv.copy_state_slots(layout.states(), *pairs.tensors(), simultaneous=pairs.simultaneous)
    assert bases_equal(layout.bases, want)


@pytest.mark.parametrize("cores", [1, 2, 7, 40, 48])
@given(case=copies())
def test_the_kernel_matches_the_reference_at_every_core_count(monkeypatch: pytest.MonkeyPatch, cores: int,
                                                              case: tuple[StateLayout, SlotPairs]) -> None:
    monkeypatch.setenv("ASCEND_KV_SIM_CORES", str(cores))
    layout, pairs = case
    want = expected(layout, pairs)
    with ascend_kv.use_backend("sim"):
        ascend_kv.copy_state_slots(layout.states(), *pairs.tensors(), simultaneous=pairs.simultaneous)
    assert bases_equal(layout.bases, want)


def test_a_view_listed_twice_is_copied_once() -> None:
    """A swap over a state listed for two layers (cross-layer sharing) swaps once, not back."""
    state = torch.arange(4 * 3, dtype=torch.float32).reshape(4, 3)
    original = state.clone()
    ascend_kv.copy_state_slots([state, state], torch.tensor([0, 1]), torch.tensor([1, 0]), simultaneous=True)
    assert torch.equal(state[[1, 0, 2, 3]], original)


# ----------------------------------------------------------------------------- the NPU route (fake NPU)


@pytest.mark.parametrize("index_on", ["device", "host"])
@given(case=copies())
def test_on_the_npu_one_launch_and_nothing_read_back(soc: str, index_on: str,
                                                     case: tuple[StateLayout, SlotPairs]) -> None:
    layout, pairs = case
    want = expected(layout, pairs)
    on_npu = layout.on(NPU)
    index = pairs.tensors(NPU if index_on == "device" else "cpu")
    seen = run(lambda: ascend_kv.copy_state_slots(on_npu.states(), *index, simultaneous=pairs.simultaneous))
    assert bases_equal(on_npu.bases, want)
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    assert seen.uploads == (1 if index_on == "host" and pairs.src else 0)
    kernel_runs = soc == SUPPORTED and any(s.numel() for s in on_npu.states()) and len(pairs.src) > 0
    assert seen.launches == (1 if kernel_runs else 0)


@st.composite
def garbage_pairs(draw: st.DrawFn) -> tuple[torch.Tensor, list[int], list[int]]:
    """Device index values nobody checked: out of range anywhere, in-range pairs disjoint and distinct."""
    slots = draw(st.integers(1, 6))
    state = torch.arange(slots * 5, dtype=torch.int16).reshape(slots, 5)
    values = st.one_of(st.integers(-3, slots + 2), st.sampled_from([-(2**63), 2**63 - 1, 2**31]))
    n = draw(st.integers(0, 5))
    src, dst = draw(st.lists(values, min_size=n, max_size=n)), draw(st.lists(values, min_size=n, max_size=n))
    used: set[int] = set()
    for i in range(n):  # keep the pairs that would be copied independent of each other
        if 0 <= src[i] < slots and 0 <= dst[i] < slots:
            if src[i] in used or dst[i] in used or src[i] == dst[i]:
                dst[i] = -1
            else:
                used.update((src[i], dst[i]))
    return state, src, dst


@given(case=garbage_pairs())
def test_out_of_range_device_pairs_are_skipped(soc: str, case: tuple[torch.Tensor, list[int], list[int]]) -> None:
    state, src, dst = case
    want = state.clone()
    for s, d in zip(src, dst):
        if 0 <= s < state.shape[0] and 0 <= d < state.shape[0]:
            want[d] = state[s]
    on_npu = state.to(NPU)
    index = [torch.tensor(v, dtype=torch.int64, device=NPU) for v in (src, dst)]
    seen = run(lambda: ascend_kv.copy_state_slots([on_npu], *index))
    assert seen.transfers == 0
    assert bits_equal(on_npu.cpu(), want)


def test_48_layers_of_conv_and_ssm_states_are_one_launch(soc: str) -> None:
    """Qwen3-Next-like pages (conv then SSM state, padding between) of 48 layers: 96 states, one launch."""
    pages = [torch.randint(-128, 127, (9, 512), dtype=torch.int8) for _ in range(48)]
    want = [p.clone() for p in pages]
    views = lambda ps: [v for p in ps for v in (p[:, :96].view(torch.bfloat16).view(9, 3, 16),
                                                p[:, 128:384].view(torch.float32).view(9, 4, 16))]
    reference.copy_state_slots(views(want), torch.tensor([0, 1, -1]), torch.tensor([5, 6, -1]))
    on_npu = [p.to(NPU) for p in pages]
    seen = run(lambda: ascend_kv.copy_state_slots(views(on_npu), torch.tensor([0, 1, -1], device=NPU),
                                                  torch.tensor([5, 6, -1], device=NPU)))
    assert seen.launches == (1 if soc == SUPPORTED else 0) and seen.transfers == 0
    assert bases_equal(on_npu, want)


# ----------------------------------------------------------------------------- temporaries


@pytest.fixture
def large_states() -> list[torch.Tensor]:
    """Two states of 256 slots (16 KiB and 4 KiB a slot): a state is 4 MiB, a slot a small part of it."""
    return [torch.randn(256, 4, 1024), torch.randn(256, 1024).to(torch.bfloat16).view(256, 2, 512)]


def slot_bytes(states: list[torch.Tensor]) -> int:
    return max(s[0].numel() * s.element_size() for s in states)


def test_the_host_path_stages_only_the_overwritten_sources(large_states: list[torch.Tensor]) -> None:
    """A swap and a chain stage the three slots both read and written, per state; independent copies stage nothing."""
    with fake_npu.largest_allocations() as seen:
        ascend_kv.copy_state_slots(large_states, torch.tensor([0, 1, 2, 7]), torch.tensor([1, 0, 7, 9]),
                                   simultaneous=True)
    assert seen.host == 3 * slot_bytes(large_states)  # slots 0, 1, 7 of the largest state, in one temporary
    with fake_npu.largest_allocations() as seen:
        ascend_kv.copy_state_slots(large_states, torch.arange(64), torch.arange(64) + 100)
    assert seen.host < 1024  # the index tensors' few bytes


def test_the_device_paths_hold_at_most_the_copied_slots(soc: str, large_states: list[torch.Tensor]) -> None:
    """The kernels stage nothing in memory; the device fallback holds the n copied slots of one state at a
    time (its gather and its masked result); never a state (4 MiB) or the states."""
    on_npu = [s.to(NPU) for s in large_states]
    n = 8
    with fake_npu.largest_allocations() as seen:
        ascend_kv.copy_state_slots(on_npu, torch.arange(n, device=NPU), torch.arange(n, device=NPU) + 100)
    largest = max(seen.host, seen.device)
    assert largest <= (1024 if soc == SUPPORTED else n * slot_bytes(large_states))
    assert largest < on_npu[1].nbytes


# ----------------------------------------------------------------------------- rules


def _states() -> list[torch.Tensor]:
    buf = torch.randn(2, 5, 3, 4)  # two layers' states [num_slots = 5, 3, 4] in one buffer
    return [buf[0], buf[1].transpose(1, 2)]


def test_rules_at_their_boundaries_write_nothing() -> None:
    states = _states()
    before = [s.clone() for s in states]
    t = torch.tensor
    rejected = [
        ((t([0]), t([4])), {}, None),                                                             # the last slot
        ((t([0]), t([5])), {}, (ValueError, r"dst_indices\[0\] = 5 is out of range: the states hold 5 slots")),
        ((t([5]), t([0])), {}, (ValueError, r"src_indices\[0\] = 5 is out of range")),
        ((t([-1, 0]), t([3, -1])), {}, None),                                                     # padding
        ((t([0, 1]), t([2, 2])), {}, (ValueError, r"dst_indices\[1\] = 2 repeats dst_indices\[0\]")),
        ((t([0, 1]), t([2, 2])), {"simultaneous": True}, (ValueError, "destination of one copy only")),
        ((t([0, 1]), t([1, 3])), {}, (ValueError, r"dst_indices\[0\] = 1 is also a source \(src_indices\[1\]\)")),
        ((t([2]), t([2])), {}, (ValueError, "both a source and a destination")),
        ((t([0, 1]), t([1, 0])), {"simultaneous": True}, None),
        ((t([0.0]), t([1])), {}, (TypeError, "src_indices must have dtype")),
        ((t([0]), t([1], dtype=torch.int16)), {}, (TypeError, "dst_indices must have dtype")),
        ((t([0, 1]), t([3])), {}, (ValueError, r"dst_indices must have 2 entries")),
        ((t([[0]]), t([[1]])), {}, (ValueError, "src_indices must be a 1-D tensor")),
    ]
    for args, kwargs, error in rejected:
        trial = [s.clone() for s in states]
        if error is None:
            ascend_kv.copy_state_slots(trial, *args, **kwargs)
            continue
        with pytest.raises(error[0], match=error[1]):
            ascend_kv.copy_state_slots(states, *args, **kwargs)
        assert all(bits_equal(s, b) for s, b in zip(states, before)), f"{args} wrote"


def test_state_rules_name_the_state() -> None:
    index = (torch.tensor([0]), torch.tensor([1]))
    buf = torch.zeros(4, 8)
    cases = [
        ([torch.zeros(4, 2), torch.zeros(3, 2)], (ValueError, r"states\[1\]\.shape\[0\] \(num_slots\) = 3 must equal")),
        ([torch.zeros(())], (ValueError, r"states\[0\] must be a state cache \[num_slots, \.\.\.\]")),
        ([torch.zeros(4, 2, dtype=torch.complex128)], (TypeError, r"states\[0\] must have an element type of 1, 2, 4")),
        ([buf[:, :5], buf[:, 3:]], (ValueError, r"states\[1\]")),                       # two views sharing bytes
        ([torch.zeros(4, 1).expand(4, 3)], (ValueError, r"states\[0\] is written in place")),
        ([torch.zeros(4, 2, requires_grad=True)], (ValueError, r"states\[0\] requires grad")),
        (["not a tensor"], (TypeError, r"states\[0\] must be a torch.Tensor")),
    ]
    for states, (kind, message) in cases:
        with pytest.raises(kind, match=message):
            ascend_kv.copy_state_slots(states, *index)
    with pytest.raises(TypeError, match="states must be a list of tensors"):
        ascend_kv.copy_state_slots(torch.zeros(4, 2), *index)  # type: ignore[arg-type]


def test_devices_must_agree(kernel_library: None) -> None:
    with pytest.raises(ValueError, match=r"states\[1\] is on cpu but states\[0\] is on npu:0"):
        ascend_kv.copy_state_slots([torch.zeros(4, 2, device=NPU), torch.zeros(4, 2)], torch.tensor([0]),
                                   torch.tensor([1]))
    with pytest.raises(ValueError, match="dst_indices is on npu:1, but index tensors must be on the host"):
        ascend_kv.copy_state_slots([torch.zeros(4, 2, device=NPU)], torch.tensor([0]), torch.tensor([1], device="npu:1"))


def test_no_states_is_a_no_op() -> None:
    ascend_kv.copy_state_slots([], torch.tensor([0, 9]), torch.tensor([1, 7]))


# ----------------------------------------------------------------------------- graphs


def _step(buf: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
    """SGLang's pool: conv and SSM states of 3 layers as views of one buffer [layers, 2, slots, ...]."""
    states = [buf[layer, kind] for layer in range(buf.shape[0]) for kind in range(2)]
    ascend_kv.copy_state_slots(states, src, dst)
    ascend_kv.copy_state_slots(states[::2], dst, src, simultaneous=True)



@pytest.mark.parametrize("dynamic", [None, True])
def test_compiled_equals_eager_with_changing_pair_counts(fresh_compile: None, dynamic: bool | None) -> None:
    compiled = torch.compile(_step, backend="inductor", fullgraph=True, dynamic=dynamic)
    for n in (1, 3, 2, 4):
        buf = torch.randn(3, 2, 12, 4, 5, generator=torch.Generator().manual_seed(n))
        src, dst = torch.arange(n, dtype=torch.int32), torch.arange(n) + 6
        dst[0] = -1  # padding
        eager, ran = buf.clone(), buf.clone()
        _step(eager, src, dst)
        compiled(ran, src, dst)
        assert bits_equal(ran, eager), f"{n} pairs"


def test_passes_opcheck() -> None:
    states = [torch.randn(6, 3), torch.randn(6, 2, 2).to(torch.bfloat16)]
    torch.library.opcheck(OPS.copy_state_slots.default, (states, torch.tensor([0, 1]), torch.tensor([4, -1])))
    torch.library.opcheck(OPS.copy_state_slots.default, (states, torch.tensor([0, 1]), torch.tensor([1, 0]), True))


@pytest.mark.parametrize("name", ["copy_state_slots", "gather_state_slots", "scatter_state_slots", "batch_memcpy"])
def test_explain_answers_the_block_copy_decision(soc: str, name: str) -> None:
    """None is an ATB operation: explain() answers BlockCopyOperation's decision, the one the calls follow."""
    decision = ascend_kv.explain(name, NPU)
    assert decision.op == "BlockCopyOperation" and ascend_kv.explain(name, "cpu").op == "BlockCopyOperation"
    assert decision.backend == ("npu" if soc == SUPPORTED else "fallback"), decision


def test_a_slot_of_more_strided_loops_than_a_piece_holds_stages_only_the_overwritten_slots() -> None:
    """Every inner dim strided apart (five loops: more than a host piece copy nests) goes through ATen,
    still staging only the slots both read and written, and still equal to the reference."""
    base = torch.randn(40, 3, 3, 3, 3, 6)
    state = base[:, ::2, ::2, ::2, ::2, ::3]                        # [40, 2, 2, 2, 2, 2], no two dims merge
    want = base.clone()
    src, dst = torch.tensor([0, 1, 5]), torch.tensor([1, 0, 9])
    reference.copy_state_slots([want[:, ::2, ::2, ::2, ::2, ::3]], src, dst, simultaneous=True)
    with fake_npu.largest_allocations() as seen:
        ascend_kv.copy_state_slots([state], src, dst, simultaneous=True)
    assert bits_equal(base, want)
    assert seen.host <= 2 * state[0].numel() * state.element_size()   # slots 0 and 1, nothing of the state


@pytest.mark.parametrize("module", [state_ops, swap_batch], ids=lambda m: m.__name__)
def test_the_docstring_examples_run(module: types.ModuleType) -> None:
    results = doctest.testmod(module, extraglobs={"torch": torch, "ascend_kv": ascend_kv})
    assert results.failed == 0 and results.attempted > 0
