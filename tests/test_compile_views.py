"""Compiled steps over views of one buffer write what eager writes, byte for byte, call after call.

Serving engines keep per-layer caches and outputs as views of one tensor (vLLM's
``kv = torch.empty(2, num_blocks, block_size, H, D)``, ``key=out_k[layer]``) and compile their
steps with ``fullgraph=True`` under automatic dynamic or ``dynamic=True`` shapes. PyTorch 2.13's
inductor loses a view's symbolic storage offset when it regenerates a written view
(``test_inductor_loses_symbolic_view_offsets`` shows it with a plain ``torch.library`` op);
``ascend_kv.operators.functionalization`` keeps the operators exact. Each step here runs four times with
changing token counts; every byte of every buffer, rows no call touched included, must equal an
eager run of the same step.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest
import torch
from cases import bits_equal

import ascend_kv

BACKENDS = ["inductor", "aot_eager"]
DYNAMIC = [None, True]
TORCH_VERSION = tuple(int(part) for part in torch.__version__.split(".")[:2])  # automatic dynamic (recompiles dynamic on the second shape), and dynamic from the start
TOKENS = [3, 5, 2, 7]
BLOCK, HEADS, HEAD = 16, 2, 16


@pytest.fixture(autouse=True)
def _no_compile_caches() -> Iterator[None]:
    """Compile each step afresh: the FX graph caches would hand one test's graph to another."""
    torch._dynamo.reset()
    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        yield


def _compare(step: Callable[..., object], make: Callable[[int], tuple[torch.Tensor, ...]], backend: str,
             dynamic: bool | None) -> None:
    """Run ``step(*make(n))`` compiled and eagerly for each token count; every buffer equal, bit for bit."""
    compiled = torch.compile(step, backend=backend, fullgraph=True, dynamic=dynamic)
    for n in TOKENS:
        eager_args = make(n)
        compiled_args = tuple(t.clone() for t in eager_args)
        step(*eager_args)
        compiled(*compiled_args)
        for position, (want, got) in enumerate(zip(eager_args, compiled_args)):
            assert bits_equal(got, want), f"argument {position} differs from eager after a call with {n} tokens"


def _tokens(n: int, head: int = HEAD, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed + n)
    return torch.randn(n, HEADS, head, generator=generator).half()


def _slots(n: int, blocks: int) -> torch.Tensor:
    """``n`` distinct slots spread over the cache, with a -1 padding entry when ``n > 2``."""
    slots = torch.randperm(blocks * BLOCK, generator=torch.Generator().manual_seed(n))[:n].to(torch.int32)
    if n > 2:
        slots[1] = -1
    return slots


# ----------------------------------------------------------------------------- reshape_and_cache


def _kv_buffer(n: int) -> tuple[torch.Tensor, ...]:
    """vLLM's layout: one ``[2, num_blocks, block_size, H, D]`` buffer per layer, K and V its halves."""
    return torch.zeros(2, 2, 6, BLOCK, HEADS, HEAD).half(), _tokens(n), _tokens(n, seed=1), _slots(n, 6)


def write_kv_halves(kv: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slots: torch.Tensor) -> None:
    for layer in range(kv.shape[0]):
        ascend_kv.reshape_and_cache(key + layer, value - layer, kv[layer, 0], kv[layer, 1], slots)


def write_into_given_views(key_cache: torch.Tensor, value_cache: torch.Tensor, key: torch.Tensor,
                           value: torch.Tensor, slots: torch.Tensor) -> None:
    ascend_kv.reshape_and_cache(key, value, key_cache, value_cache, slots)


def write_mla_columns(buf: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slots: torch.Tensor) -> None:
    """MLA: K and V as column slices (here 16 + 8) of one ``[nb, bs, 1, 24]`` buffer."""
    ascend_kv.reshape_and_cache(key, value, buf[..., :16], buf[..., 16:], slots)


def write_nz_layers(kv: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slots: torch.Tensor) -> None:
    for layer in range(kv.shape[0]):
        ascend_kv.reshape_and_cache(key, value, kv[layer, 0], kv[layer, 1], slots, kv_cache_cfg="nz")


@pytest.mark.parametrize("backend,dynamic", list(itertools.product(BACKENDS, DYNAMIC)))
def test_reshape_and_cache_into_kv_halves_of_per_layer_buffers(backend: str, dynamic: bool | None) -> None:
    _compare(write_kv_halves, _kv_buffer, backend, dynamic)


@pytest.mark.parametrize("backend,dynamic", list(itertools.product(BACKENDS, DYNAMIC)))
def test_reshape_and_cache_into_views_made_outside_the_graph(backend: str, dynamic: bool | None) -> None:
    compiled = torch.compile(write_into_given_views, backend=backend, fullgraph=True, dynamic=dynamic)
    for n in TOKENS:
        eager, mine = torch.zeros(2, 2, 6, BLOCK, HEADS, HEAD).half(), torch.zeros(2, 2, 6, BLOCK, HEADS, HEAD).half()
        key, value, slots = _tokens(n), _tokens(n, seed=1), _slots(n, 6)
        write_into_given_views(eager[1, 0], eager[1, 1], key, value, slots)
        compiled(mine[1, 0], mine[1, 1], key, value, slots)
        assert bits_equal(mine, eager), f"{n} tokens"


@pytest.mark.parametrize("backend,dynamic", list(itertools.product(BACKENDS, DYNAMIC)))
def test_reshape_and_cache_into_mla_column_slices(backend: str, dynamic: bool | None) -> None:
    def make(n: int) -> tuple[torch.Tensor, ...]:
        key = torch.randn(n, 1, 16).half()
        return torch.zeros(5, BLOCK, 1, 24).half(), key, torch.randn(n, 1, 8).half(), _slots(n, 5)

    _compare(write_mla_columns, make, backend, dynamic)


@pytest.mark.parametrize("backend,dynamic", list(itertools.product(BACKENDS, DYNAMIC)))
def test_reshape_and_cache_nz_into_per_layer_halves(backend: str, dynamic: bool | None) -> None:
    def make(n: int) -> tuple[torch.Tensor, ...]:
        key = _tokens(n).reshape(n, 1, HEADS * HEAD)
        return torch.zeros(2, 2, 4, HEADS * HEAD // 16, BLOCK, 16).half(), key, key * 2, _slots(n, 4)

    _compare(write_nz_layers, make, backend, dynamic)


# ----------------------------------------------------------------------------- paged_cache_load


def _paged(n: int) -> tuple[torch.Tensor, ...]:
    """Per-layer caches and outputs as views of one buffer each; two sequences of ``n`` and ``n + 1`` tokens."""
    caches = torch.randn(2, 2, 4, BLOCK, HEADS, HEAD, generator=torch.Generator().manual_seed(n)).half()
    table = torch.tensor([[3, 1], [0, 2]], dtype=torch.int32)
    lens = torch.tensor([n, n + 1], dtype=torch.int32)
    rows = 2 * n + 1
    return caches, table, lens, torch.zeros(2, rows + 3, HEADS, HEAD).half(), torch.zeros(2, rows + 3, HEADS, HEAD).half()


def load_per_layer_outputs(caches: torch.Tensor, table: torch.Tensor, lens: torch.Tensor, out_k: torch.Tensor,
                           out_v: torch.Tensor) -> None:
    for layer in range(caches.shape[0]):
        ascend_kv.paged_cache_load(caches[layer, 0], caches[layer, 1], table, lens, kv_cache_cfg="nd",
                                   key=out_k[layer], value=out_v[layer])


def load_allocating(caches: torch.Tensor, table: torch.Tensor, lens: torch.Tensor, out_k: torch.Tensor,
                    out_v: torch.Tensor) -> None:
    key, value = ascend_kv.paged_cache_load(caches[1, 0], caches[1, 1], table, lens, kv_cache_cfg="nd")
    out_k[1].narrow(0, 0, key.shape[0]).copy_(key)
    out_v[0].narrow(0, 0, value.shape[0]).copy_(value)


def load_allocating_sliced(caches: torch.Tensor, table: torch.Tensor, lens: torch.Tensor, out_k: torch.Tensor,
                           out_v: torch.Tensor) -> None:
    """As :func:`load_allocating`, the rows taken by a slice (whose length torch must prove equal to the rows')."""
    key, value = ascend_kv.paged_cache_load(caches[1, 0], caches[1, 1], table, lens, kv_cache_cfg="nd")
    out_k[1, : key.shape[0]].copy_(key)
    out_v[0, : value.shape[0]].copy_(value)


@pytest.mark.parametrize("backend,dynamic", list(itertools.product(BACKENDS, DYNAMIC)))
def test_paged_cache_load_into_per_layer_outputs(backend: str, dynamic: bool | None) -> None:
    _compare(load_per_layer_outputs, _paged, backend, dynamic)


@pytest.mark.parametrize("backend,dynamic", list(itertools.product(BACKENDS, DYNAMIC)))
def test_paged_cache_load_allocating_from_per_layer_caches(backend: str, dynamic: bool | None) -> None:
    _compare(load_allocating, _paged, backend, dynamic)


@pytest.mark.parametrize("backend,dynamic", list(itertools.product(BACKENDS, DYNAMIC)))
def test_allocated_rows_copied_through_a_slice(backend: str, dynamic: bool | None) -> None:
    """Exact from 2.13; before, torch cannot prove the slice as long as the unbacked row count and says
    so when it traces (docs/compiling.md: torch._check or narrow is the way there), never a wrong byte."""
    if TORCH_VERSION >= (2, 13):
        _compare(load_allocating_sliced, _paged, backend, dynamic)
        return
    with pytest.raises(Exception, match="data-dependent expression"):
        _compare(load_allocating_sliced, _paged, backend, dynamic)


# ----------------------------------------------------------------------------- kv_cache


def _past(n: int) -> tuple[torch.Tensor, ...]:
    """Per-layer views of one ``past`` buffer ``[2 models' layers, layers, batch, max_seq_len, hidden]``."""
    past = torch.zeros(2, 3, 2, 12, HEADS * HEAD).half()
    lens = torch.tensor([n, 1], dtype=torch.int32)
    offsets = torch.tensor([n + 2, 4], dtype=torch.int32)
    return past, torch.randn(n + 1, HEADS * HEAD).half(), offsets, lens


def kv_cache_per_layer_views(past: torch.Tensor, new_kv: torch.Tensor, offsets: torch.Tensor,
                             lens: torch.Tensor) -> None:
    for layer in range(past.shape[1]):
        ascend_kv.kv_cache(new_kv + layer, layer, past[1], offsets, lens)
        ascend_kv.kv_cache(new_kv - layer, torch.tensor(layer), past[0], offsets, lens)


@pytest.mark.parametrize("backend,dynamic", list(itertools.product(BACKENDS, DYNAMIC)))
def test_kv_cache_into_views_of_one_past(backend: str, dynamic: bool | None) -> None:
    _compare(kv_cache_per_layer_views, _past, backend, dynamic)


# ----------------------------------------------------------------------------- block_copy, copy_blocks, swap_blocks


def _blocks(n: int) -> tuple[torch.Tensor, ...]:
    """Per-layer K/V halves of one buffer ``[layers, 2, num_blocks, block_size, H, D]``; ``n`` forks of
    block 0 (into blocks 1..n), and ``n`` (src, dst) pairs copying block 9 there."""
    buf = torch.randn(2, 2, 10, BLOCK, HEADS, HEAD, generator=torch.Generator().manual_seed(n)).half()
    src, dst, cum_sum = torch.tensor([0]), torch.arange(1, n + 1), torch.tensor([n])
    mapping = torch.stack([torch.full((n,), 9), torch.arange(n) + 1], dim=1)           # block 9 to 1..n
    return buf, src, dst, cum_sum, mapping


def fork_and_copy_per_layer(buf: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, cum_sum: torch.Tensor,
                            mapping: torch.Tensor) -> None:
    for layer in range(buf.shape[0]):
        ascend_kv.block_copy(buf[layer, 0], buf[layer, 1], src, dst, cum_sum)
    ascend_kv.copy_blocks([buf[layer, 0] for layer in range(buf.shape[0])],
                          [buf[layer, 1] for layer in range(buf.shape[0])], mapping)


def swap_between_layers(buf: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, cum_sum: torch.Tensor,
                        mapping: torch.Tensor) -> None:
    ascend_kv.swap_blocks(buf[0, 1], buf[1, 0], mapping)


@pytest.mark.parametrize("backend,dynamic", list(itertools.product(BACKENDS, DYNAMIC)))
@pytest.mark.parametrize("step", [fork_and_copy_per_layer, swap_between_layers])
def test_block_ops_on_per_layer_halves(step: Callable[..., None], backend: str, dynamic: bool | None) -> None:
    _compare(step, _blocks, backend, dynamic)


# ----------------------------------------------------------------------------- the torch_npu facade


def facade_write_and_gather(kv: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slots: torch.Tensor) -> None:
    """vllm-ascend's calls on per-layer K/V halves: _npu_reshape_and_cache, then npu_gather_pa_kv_cache
    into per-layer views of one output buffer (the rows past the table are zero-filled)."""
    from ascend_kv.compat import torch_npu

    table, lens = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32), torch.tensor([5, 9], dtype=torch.int32)
    for layer in range(kv.shape[0]):
        torch_npu._npu_reshape_and_cache(key=key + layer, value=value, key_cache=kv[layer, 0], value_cache=kv[layer, 1],
                                         slot_indices=slots)
    out = kv.new_zeros(2, 2, 14, HEADS, HEAD)
    for layer in range(kv.shape[0]):
        torch_npu.npu_gather_pa_kv_cache(kv[layer, 0], kv[layer, 1], table, lens, out[layer, 0], out[layer, 1])
    kv[0, 0, 5, :14].copy_(out[1, 1])  # the gathered rows, back where the step can compare them


@pytest.mark.parametrize("backend,dynamic", list(itertools.product(BACKENDS, DYNAMIC)))
def test_facade_calls_on_per_layer_halves(backend: str, dynamic: bool | None) -> None:
    _compare(facade_write_and_gather, _kv_buffer, backend, dynamic)


# ----------------------------------------------------------------------------- the PyTorch bug itself


def test_inductor_loses_symbolic_view_offsets() -> None:
    """The bug the rule works around, with a plain op of our own: if it passes, PyTorch has fixed it.

    Two per-layer writes under ``dynamic=True``: inductor writes the second layer's rows into the
    first. When this test fails, ``ascend_kv.operators.functionalization``'s copy route may no longer be needed.
    """
    lib = torch.library.Library("ascend_kv_repro", "FRAGMENT")
    lib.define("write(Tensor(a!) dst, Tensor index, Tensor src) -> ()")
    def write(dst: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> None:
        dst.index_copy_(0, index, src)

    lib.impl("write", write, "CPU")
    torch.library.register_fake("ascend_kv_repro::write", lambda dst, index, src: None, lib=lib)

    def step(out: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> None:
        for layer in range(2):
            torch.ops.ascend_kv_repro.write(out[layer], index, src + layer)

    out, index, src = torch.zeros(2, 8, 4), torch.arange(3), torch.ones(3, 4)
    torch.compile(step, backend="inductor", fullgraph=True, dynamic=True)(out, index, src)
    lib._destroy()
    assert torch.equal(out[1, :3], torch.zeros(3, 4)), "layer 1 written: PyTorch fixed the bug"
    assert torch.equal(out[0, :3], torch.full((3, 4), 2.0)), "layer 1's rows land in layer 0"


# ----------------------------------------------------------------------------- the layout helpers


@pytest.mark.parametrize("dynamic", DYNAMIC)
def test_layout_helpers_trace_in_a_compiled_step(dynamic: bool | None) -> None:
    """nd_to_nz and nz_to_nd inside a fullgraph step (building or reading an NZ cache), exact."""

    def step(nd: torch.Tensor, key: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        nz = ascend_kv.nd_to_nz(nd)
        ascend_kv.reshape_and_cache(key, key, nz, nz.clone(), slots, kv_cache_cfg="nz")
        return nz, ascend_kv.nz_to_nd(nz, HEADS)

    compiled = torch.compile(step, backend="inductor", fullgraph=True, dynamic=dynamic)
    for n in TOKENS:
        nd = torch.randn(4, BLOCK, HEADS, HEAD, generator=torch.Generator().manual_seed(n)).half()
        key, slots = _tokens(n), _slots(n, 4)
        for want, got in zip(step(nd, key, slots), compiled(nd, key, slots)):
            assert bits_equal(got, want), f"{n} tokens"
