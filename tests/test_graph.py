"""The public functions in PyTorch's graph tools: torch.compile, make_fx, FakeTensorMode, opcheck.

A serving engine calls ``ascend_kv.kv_cache`` and friends, not ``torch.ops``: these tests call
the public names (and the ATB-style objects) and check that each call is one operator to the
graph tools, with eager results bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from cases import (
    ND,
    NZ,
    kv_cache_case,
    paged_case,
    require_compiled_as_eager,
    reshape_and_cache_case,
    results,
)
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import ascend_kv
from ascend_kv import KvCacheCfg, PagedCacheLoadParam

OPS = torch.ops.ascend_kv


def kv_step(new_kv: torch.Tensor, layer: torch.Tensor, past: torch.Tensor, offsets: torch.Tensor,
            lens: torch.Tensor) -> torch.Tensor:
    ascend_kv.kv_cache(new_kv, 1, past, offsets, lens)
    return ascend_kv.kv_cache(new_kv, layer, past, offsets, lens)[1].flip(0)


def kv_step_atb(new_kv: torch.Tensor, layer: torch.Tensor, past: torch.Tensor, offsets: torch.Tensor,
                lens: torch.Tensor) -> torch.Tensor:
    return ascend_kv.KVCacheOperation(ascend_kv.KVCacheParam())(new_kv, 0, past, offsets, lens)[0].flip(0)


def load_nd(key_cache: torch.Tensor, value_cache: torch.Tensor, table: torch.Tensor, lens: torch.Tensor,
            starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return ascend_kv.paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg="nd", seq_starts=starts)


def load_nz(key_cache: torch.Tensor, value_cache: torch.Tensor, table: torch.Tensor, lens: torch.Tensor,
            starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return ascend_kv.paged_cache_load(key_cache, value_cache, table, lens)


def load_into(key_cache: torch.Tensor, value_cache: torch.Tensor, table: torch.Tensor, lens: torch.Tensor,
              starts: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    ascend_kv.paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg=KvCacheCfg.K_CACHE_V_CACHE_ND,
                               cumsum=True, key=key, value=value)
    return key[:3].flip(0)


def load_into_atb(key_cache: torch.Tensor, value_cache: torch.Tensor, table: torch.Tensor, lens: torch.Tensor,
                  starts: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    param = PagedCacheLoadParam(kv_cache_cfg=KvCacheCfg.K_CACHE_V_CACHE_ND, is_seq_lens_cumsum_mode=True)
    out_key, _ = ascend_kv.PagedCacheLoadOperation(param)(key_cache, value_cache, table, lens, key, value)
    return out_key[:3].flip(0)


def write_nd(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
             slots: torch.Tensor) -> torch.Tensor:
    ascend_kv.reshape_and_cache(key, value, key_cache, value_cache, slots)
    return key_cache[1].flip(0)


def write_nz_atb(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                 slots: torch.Tensor) -> torch.Tensor:
    param = ascend_kv.ReshapeAndCacheParam(kv_cache_cfg=ascend_kv.ReshapeAndCacheParam.KvCacheCfg.K_CACHE_V_CACHE_NZ)
    _, out_value = ascend_kv.ReshapeAndCacheOperation(param)(key, value, key_cache, value_cache, slots)
    return out_value[0].flip(0)


def write_key_only(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                   slots: torch.Tensor) -> torch.Tensor:
    return ascend_kv.reshape_and_cache(key, None, key_cache, None, slots)[0][2].flip(0)


def write_inputs(layout: str) -> list[torch.Tensor]:
    return list(reshape_and_cache_case(layout, [17, -1, 40, 3], num_tokens=5, key_dtype=torch.bfloat16).args)


def kv_inputs() -> list[torch.Tensor]:
    case = kv_cache_case(torch.float16, [2, 0, 1], [2, 16, 9], layers=3)
    new_kv, _, past, offsets, lens = case.args
    return [new_kv, torch.tensor(2, dtype=torch.int32), past, offsets, lens]


def load_inputs(layout: KvCacheCfg, outputs: bool) -> list[torch.Tensor]:
    if layout == NZ:
        case = paged_case(NZ, [16, 33], key_dtype=torch.int8, value_dtype=torch.float16, head_size_k=32)
        return [*case.args, torch.zeros(2, dtype=torch.int32)]
    case = paged_case(ND, [5, 17], cumsum_base=2 if outputs else None, seq_starts=None if outputs else [3, 16])
    tensors = [*case.args, case.kwargs.get("seq_starts", torch.zeros(2, dtype=torch.int32))]
    if outputs:
        rows = int(case.args[3][-1])
        tensors += [torch.full((rows + 2, *case.args[0].shape[2:]), 7, dtype=case.args[0].dtype),
                    torch.full((rows + 2, *case.args[1].shape[2:]), 7, dtype=case.args[1].dtype)]
    return tensors


STEPS: dict[str, tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]] = {
    "kv_cache": (kv_step, kv_inputs),
    "KVCacheOperation": (kv_step_atb, kv_inputs),
    "paged_cache_load ND allocating": (load_nd, lambda: load_inputs(ND, False)),
    "paged_cache_load NZ allocating": (load_nz, lambda: load_inputs(NZ, False)),
    "paged_cache_load ND into outputs": (load_into, lambda: load_inputs(ND, True)),
    "PagedCacheLoadOperation into outputs": (load_into_atb, lambda: load_inputs(ND, True)),
    "reshape_and_cache ND": (write_nd, lambda: write_inputs("nd")),
    "ReshapeAndCacheOperation NZ": (write_nz_atb, lambda: write_inputs("nz")),
    "reshape_and_cache key only": (write_key_only, lambda: write_inputs("nd")),
}


@pytest.mark.parametrize("name", STEPS)
def test_compiled_public_call_matches_eager_and_writes_in_place(name: str) -> None:
    require_compiled_as_eager(*STEPS[name])


@pytest.mark.parametrize("name", STEPS)
def test_make_fx_records_each_public_call_as_one_operator(name: str) -> None:
    step, inputs = STEPS[name]
    graph = make_fx(step)(*inputs())
    targets = [str(node.target) for node in graph.graph.nodes if node.op == "call_function"]
    ours = [t for t in targets if t.startswith("ascend_kv.")]
    expected = 2 if name == "kv_cache" else 1
    assert len(ours) == expected, targets
    assert all(t.startswith(("ascend_kv.kv_cache", "ascend_kv.paged_cache_load", "ascend_kv.reshape_and_cache"))
               for t in ours)


@pytest.mark.parametrize("name", STEPS)
def test_public_call_runs_under_fake_tensor_mode(name: str) -> None:
    step, inputs = STEPS[name]
    real = inputs()
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:  # a shape environment: allocated rows are data-dependent
        fake = [mode.from_tensor(t) for t in real]
        out = results(step(*fake))
    eager = results(step(*[t.clone() for t in real]))
    assert [o.dtype for o in out] == [e.dtype for e in eager]
    assert [o.shape[1:] for o in out] == [e.shape[1:] for e in eager]


def test_layer_tensor_overload_passes_opcheck() -> None:
    new_kv, layer, past, offsets, lens = kv_inputs()
    for t in (new_kv, past):
        t.nan_to_num_(nan=0.0)
    torch.library.opcheck(OPS.kv_cache.layer_tensor, (new_kv, layer, past, offsets, lens))


@pytest.mark.parametrize("layout", ["nd", "nz", "key only"])
def test_reshape_and_cache_passes_opcheck(layout: str) -> None:
    key, value, key_cache, value_cache, slots = write_inputs("nd" if layout == "key only" else layout)
    if layout == "key only":
        value = value_cache = None
    for t in (key, value, key_cache, value_cache):
        if t is not None:
            t.nan_to_num_(nan=0.0)
    torch.library.opcheck(OPS.reshape_and_cache.default, (key, value, key_cache, value_cache, slots),
                          {"kv_cache_cfg": "nd" if layout == "key only" else layout})


def test_every_operator_overload_is_tested_by_opcheck() -> None:
    """The overloads registered are exactly those the opcheck tests of this suite (and of
    tests/test_quant.py, for the quantizing overloads) cover."""
    covered = {"kv_cache.default", "kv_cache.layer_tensor", "paged_cache_load.default", "paged_cache_load.into",
               "reshape_and_cache.default", "reshape_and_cache.quant",
              "paged_cache_load.dequant", "paged_cache_load.dequant_into"}
    registered = {f"{name}.{overload}" for name in ("kv_cache", "paged_cache_load", "reshape_and_cache")
                  for overload in getattr(OPS, name).overloads()}
    assert registered == covered
