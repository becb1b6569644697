"""gather_state_slots and scatter_state_slots (docs/semantics.md §14.2) through the public functions:
every backend bit for bit against the plain reference, the buffer on the device or the host, the
rules at their boundaries, the temporaries, compiled and eager.
"""

from __future__ import annotations

import fake_npu
import npu_fixtures
import pytest
import torch
from cases import bits_equal
from hypothesis import given
from hypothesis import strategies as st
from npu_fixtures import NPU, SUPPORTED, run
from state_cases import INDEX_DTYPES, StateLayout, random_bits, state_layouts

import ascend_kv
from ascend_kv.tools import reference

OPS = torch.ops.ascend_kv
kernel_library, soc = npu_fixtures.kernel_library, npu_fixtures.soc  # the fake NPU's route (fixtures)


@st.composite
def transfers(draw: st.DrawFn) -> tuple[StateLayout, list[int], bool, torch.dtype, int]:
    """(states, slot ids, gather, index dtype, spare bytes after each buffer row): gathers repeat ids,
    scatters name each once; -1 is padding in both."""
    layout = draw(state_layouts())
    gather = draw(st.booleans())
    slots = layout.num_slots
    if gather:
        ids = draw(st.lists(st.integers(-1, slots - 1), max_size=6))
    else:
        ids = [i if draw(st.booleans()) else -1 for i in draw(st.permutations(range(slots)))][:6]
    return layout, ids, gather, draw(st.sampled_from(INDEX_DTYPES)), draw(st.sampled_from([0, 0, 5]))


def buffer_for(layout: StateLayout, n: int, spare: int, seed: int = 3) -> torch.Tensor:
    """A random [n, row bytes] buffer whose rows are `spare` bytes apart past their end (a view of a wider one)."""
    width = ascend_kv.state_slot_bytes(layout.states())
    return random_bits((n, width + spare), torch.uint8, seed)[:, :width]


def expect(layout: StateLayout, ids: list[int], gather: bool, buffer: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The bases and the buffer (on the host) after the reference's call."""
    bases, want_buffer = [b.cpu() for b in layout.cloned()], buffer.cpu().clone()
    slot_ids = torch.tensor(ids, dtype=torch.int64)
    if gather:
        reference.gather_state_slots(layout.states(bases), slot_ids, want_buffer)
    else:
        reference.scatter_state_slots(want_buffer, layout.states(bases), slot_ids)
    return bases, want_buffer


def call(layout: StateLayout, slot_ids: torch.Tensor, gather: bool, buffer: torch.Tensor) -> None:
    if gather:
        ascend_kv.gather_state_slots(layout.states(), slot_ids, buffer)
    else:
        ascend_kv.scatter_state_slots(buffer, layout.states(), slot_ids)


def check(layout: StateLayout, ids: list[int], gather: bool, dtype: torch.dtype, buffer: torch.Tensor) -> None:
    bases, want_buffer = expect(layout, ids, gather, buffer)
    call(layout, torch.tensor(ids, dtype=dtype), gather, buffer)
    assert bits_equal(buffer, want_buffer)
    assert all(bits_equal(got, want) for got, want in zip(layout.bases, bases))


# ----------------------------------------------------------------------------- the host paths and the sim


@given(case=transfers())
def test_matches_the_reference_on_the_host(backend: str, case: tuple[StateLayout, list[int], bool, torch.dtype, int]) -> None:
    layout, ids, gather, dtype, spare = case
    check(layout, ids, gather, dtype, buffer_for(layout, len(ids), spare))


@pytest.mark.parametrize("cores", [1, 2, 7, 40, 48])
@given(case=transfers())
def test_the_kernel_matches_the_reference_at_every_core_count(monkeypatch: pytest.MonkeyPatch, cores: int,
                                                              case: tuple[StateLayout, list[int], bool, torch.dtype, int]) -> None:
    monkeypatch.setenv("ASCEND_KV_SIM_CORES", str(cores))
    layout, ids, gather, dtype, spare = case
    with ascend_kv.use_backend("sim"):
        check(layout, ids, gather, dtype, buffer_for(layout, len(ids), spare))


def test_a_round_trip_restores_every_state_of_every_layer() -> None:
    """vLLM's pages (conv state, SSM state, padding) of 48 layers: out to a buffer and into fresh pages."""
    pages = [random_bits((6, 320), torch.uint8, layer) for layer in range(48)]
    views = lambda ps: [v for p in ps for v in (p[:, :96].view(torch.bfloat16).view(6, 16, 3).transpose(1, 2),
                                                p[:, 128:320].view(torch.float32).view(6, 3, 16))]
    ids = torch.tensor([4, 1])
    out = torch.empty(2, ascend_kv.state_slot_bytes(views(pages)), dtype=torch.uint8)
    ascend_kv.gather_state_slots(views(pages), ids, out)
    fresh = [torch.zeros_like(p) for p in pages]
    ascend_kv.scatter_state_slots(out, views(fresh), torch.tensor([0, 5]))
    for page, back in zip(pages, fresh):
        assert torch.equal(back[0, :96], page[4, :96]) and torch.equal(back[5, 128:], page[1, 128:])
        assert not back[0, 96:128].any() and not back[1:5].any()  # the padding and the other slots untouched


# ----------------------------------------------------------------------------- the NPU route (fake NPU)


@pytest.mark.parametrize("index_on", ["device", "host"])
@given(case=transfers())
def test_on_the_npu_one_launch_and_nothing_read_back(soc: str, index_on: str,
                                                     case: tuple[StateLayout, list[int], bool, torch.dtype, int]) -> None:
    layout, ids, gather, dtype, spare = case
    buffer = buffer_for(layout, len(ids), spare)
    bases, want_buffer = expect(layout, ids, gather, buffer)
    on_npu, on_device = layout.on(NPU), fake_npu.same_layout([buffer]).values[0]
    slot_ids = torch.tensor(ids, dtype=dtype, device=NPU if index_on == "device" else "cpu")
    seen = run(lambda: call(on_npu, slot_ids, gather, on_device))
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    assert seen.uploads == (1 if index_on == "host" and ids else 0)
    moves = bool(ids) and ascend_kv.state_slot_bytes(layout.states()) > 0
    assert seen.launches == (1 if soc == SUPPORTED and moves else 0)
    assert bits_equal(on_device.cpu(), want_buffer)
    assert all(bits_equal(got.cpu(), want) for got, want in zip(on_npu.bases, bases))


def test_the_call_itself_reads_nothing_back(soc: str) -> None:
    states = [torch.randn(8, 4, 16).to(NPU), torch.randn(8, 32).to(torch.bfloat16).to(NPU)]
    out = torch.zeros(3, ascend_kv.state_slot_bytes(states), dtype=torch.uint8, device=NPU)
    for ids in (torch.tensor([7, -1, 2], device=NPU), torch.tensor([7, -1, 2])):
        seen = run(lambda ids=ids: ascend_kv.gather_state_slots(states, ids, out))
        assert seen.transfers == 0 and seen.blocking_uploads == 0 and seen.launches == (1 if soc == SUPPORTED else 0)
        seen = run(lambda ids=ids: ascend_kv.scatter_state_slots(out, states, ids))
        assert seen.transfers == 0 and seen.launches == (1 if soc == SUPPORTED else 0)


def test_pinned_host_buffers_round_trip_without_waiting(soc: str) -> None:
    """Offload: out to pinned host memory (one non-blocking copy back) and in again (one non-blocking upload)."""
    host_states = [torch.randn(8, 4, 16), torch.randn(8, 3).to(torch.float16)]
    states = [s.to(NPU) for s in host_states]
    out = torch.full((2, ascend_kv.state_slot_bytes(states)), 7, dtype=torch.uint8).pin_memory()
    for ids in (torch.tensor([6, 1], device=NPU), torch.tensor([6, -1])):  # device ids; host ids with padding
        seen = run(lambda ids=ids: ascend_kv.gather_state_slots(states, ids, out))
        assert seen.transfers == 1 and seen.blocking_uploads == 0  # the one copy back to the host
    want = reference.gather_state_slots(host_states, torch.tensor([6, 1]), torch.full_like(out, 7))
    assert torch.equal(out[0], want[0]) and torch.equal(out[1], want[1])
    fresh = [torch.zeros_like(s) for s in states]
    into = torch.tensor([0, 3], device=NPU)
    seen = run(lambda: ascend_kv.scatter_state_slots(out, fresh, into))
    assert seen.transfers == 0 and seen.blocking_uploads == 0
    assert torch.equal(fresh[0][3].cpu(), host_states[0][1]) and torch.equal(fresh[1][0].cpu(), host_states[1][6])


# ----------------------------------------------------------------------------- temporaries


def test_no_temporary_of_a_state(soc: str) -> None:
    """The host path and the kernels hold nothing; the device fallback the n moved slots of one state
    (twice: the gathered slots and the masked result), never a state."""
    states = [torch.randn(256, 4, 1024), torch.randn(256, 512)]
    ids = torch.tensor([3, 9, -1, 200])
    out = torch.empty(4, ascend_kv.state_slot_bytes(states), dtype=torch.uint8)
    with fake_npu.largest_allocations() as seen:
        ascend_kv.gather_state_slots(states, ids, out)
        ascend_kv.scatter_state_slots(out, states, ids)
    assert seen.host < 1024
    on_npu, out_npu = [s.to(NPU) for s in states], out.to(NPU)
    with fake_npu.largest_allocations() as seen:
        ascend_kv.gather_state_slots(on_npu, ids.to(NPU), out_npu)
        ascend_kv.scatter_state_slots(out_npu, on_npu, ids.to(NPU))
    largest = max(seen.host, seen.device)
    assert largest <= (1024 if soc == SUPPORTED else len(ids) * 16384)
    assert largest < states[0].nbytes // 16


# ----------------------------------------------------------------------------- rules


def test_rules_at_their_boundaries_write_nothing() -> None:
    states = [torch.randn(5, 2, 3), torch.randn(5, 4).to(torch.bfloat16)]
    width = ascend_kv.state_slot_bytes(states)
    assert width == 2 * 3 * 4 + 4 * 2
    out = torch.full((2, width), 9, dtype=torch.uint8)
    t = torch.tensor
    ascend_kv.gather_state_slots(states, t([4, -1]), out.clone())                          # the last slot, padding
    with pytest.raises(ValueError, match=r"slot_ids\[0\] = 5 is out of range: the states hold 5 slots"):
        ascend_kv.gather_state_slots(states, t([5, 0]), out)
    with pytest.raises(TypeError, match="out must have dtype uint8, got int8"):
        ascend_kv.gather_state_slots(states, t([0, 1]), out.view(torch.int8))
    with pytest.raises(ValueError, match=rf"out must have shape \(2, {width}\)"):
        ascend_kv.gather_state_slots(states, t([0, 1]), out[:, 1:])
    with pytest.raises(ValueError, match=rf"out must have shape \(3, {width}\)"):
        ascend_kv.gather_state_slots(states, t([0, 1, 2]), out)
    with pytest.raises(ValueError, match="must hold each row's bytes contiguously"):
        ascend_kv.gather_state_slots(states, t([0, 1]), torch.zeros(width, 2, dtype=torch.uint8).t())
    with pytest.raises(TypeError, match="slot_ids must have dtype"):
        ascend_kv.gather_state_slots(states, t([0.0, 1.0]), out)
    assert (out == 9).all()
    before = [s.clone() for s in states]
    ascend_kv.scatter_state_slots(out.clone(), [s.clone() for s in states], t([4, 3]))   # distinct
    with pytest.raises(ValueError, match=r"slot_ids\[1\] = 3 repeats slot_ids\[0\]: scatter_state_slots writes"):
        ascend_kv.scatter_state_slots(out, states, t([3, 3]))
    ascend_kv.scatter_state_slots(out.clone(), [s.clone() for s in states], t([-1, -1]))  # padding twice
    inside = torch.empty(0, dtype=torch.uint8).set_(states[0].untyped_storage())[:2 * width].view(2, width)
    with pytest.raises(ValueError, match=r"states\[0\]"):                                 # a buffer inside a state
        ascend_kv.scatter_state_slots(inside, states, t([0, 1]))
    assert all(bits_equal(s, b) for s, b in zip(states, before))
    with pytest.raises(ValueError, match=r"^out "):
        ascend_kv.gather_state_slots(states, t([0, 1]), inside)
    assert all(bits_equal(s, b) for s, b in zip(states, before))


def test_devices_must_agree(kernel_library: None) -> None:
    states = [torch.zeros(4, 2, device=NPU)]
    with pytest.raises(ValueError, match="out must be on the states' device"):
        ascend_kv.gather_state_slots(states, torch.tensor([0]), torch.zeros(1, 8, dtype=torch.uint8, device="npu:1"))
    with pytest.raises(ValueError, match="slot_ids is on npu:1"):
        ascend_kv.scatter_state_slots(torch.zeros(1, 8, dtype=torch.uint8), states, torch.tensor([0], device="npu:1"))


# ----------------------------------------------------------------------------- graphs


def _step(buf: torch.Tensor, out: torch.Tensor, ids: torch.Tensor, back: torch.Tensor) -> None:
    """Per-layer views of one buffer out to `out`, then into other slots of `back`."""
    states = [buf[layer] for layer in range(buf.shape[0])]
    ascend_kv.gather_state_slots(states, ids, out)
    ascend_kv.scatter_state_slots(out, [back[layer] for layer in range(back.shape[0])], ids.flip(0))



@pytest.mark.parametrize("dynamic", [None, True])
def test_compiled_equals_eager_with_changing_slot_counts(fresh_compile: None, dynamic: bool | None) -> None:
    compiled = torch.compile(_step, backend="inductor", fullgraph=True, dynamic=dynamic)
    for n in (1, 3, 2, 4):
        buf = torch.randn(3, 10, 2, 5, generator=torch.Generator().manual_seed(n))
        ids = torch.arange(n, dtype=torch.int32) * 2
        out = torch.zeros(n, 3 * 40, dtype=torch.uint8)
        args = (buf, out, ids, torch.zeros_like(buf))
        eager, ran = [a.clone() for a in args], [a.clone() for a in args]
        _step(*eager)
        compiled(*ran)
        assert all(bits_equal(r, e) for r, e in zip(ran, eager)), f"{n} slots"


def test_pass_opcheck() -> None:
    states = [torch.randn(6, 3), torch.randn(6, 2, 2).to(torch.bfloat16)]
    ids = torch.tensor([4, -1, 0])
    out = torch.zeros(3, 20, dtype=torch.uint8)
    torch.library.opcheck(OPS.gather_state_slots.default, (states, ids, out))
    torch.library.opcheck(OPS.scatter_state_slots.default, (out, [s.clone() for s in states], ids))


def test_a_slot_of_more_strided_loops_than_a_piece_holds_round_trips() -> None:
    """Five inner loops (more than a host piece copy nests): through one slot of memory at a time."""
    base = torch.randn(40, 3, 3, 3, 3, 6)
    state = base[:, ::2, ::2, ::2, ::2, ::3]
    ids = torch.tensor([7, -1, 3])
    out = torch.zeros(3, ascend_kv.state_slot_bytes([state]), dtype=torch.uint8)
    want = reference.gather_state_slots([state], ids, out.clone())
    with fake_npu.largest_allocations() as seen:
        ascend_kv.gather_state_slots([state], ids, out)
    assert bits_equal(out, want) and seen.host <= state[0].numel() * state.element_size()
    fresh = torch.zeros_like(base)
    ascend_kv.scatter_state_slots(out, [fresh[:, ::2, ::2, ::2, ::2, ::3]], torch.tensor([1, -1, 2]))
    assert bits_equal(fresh[1, ::2, ::2, ::2, ::2, ::3], state[7]) and bits_equal(fresh[2, ::2, ::2, ::2, ::2, ::3], state[3])
    assert not fresh[0].any() and not fresh[1, 1::2].any()
