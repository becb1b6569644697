"""Both operations as PyTorch operators: ``torch.ops.ascend_kv.kv_cache`` and ``.paged_cache_load``.

Registered with :class:`torch.library.Library` and a plain Python kernel: 4 to 8 us per call
on top of the public function, where a ``torch.library.custom_op`` wrapper costs about 30 us
(``scripts/op_overhead.py``). ``torch.compile`` traces them and ``torch.library.opcheck`` tests them:

``kv_cache(Tensor new_kv, int layer_id, Tensor(a!) past, Tensor token_offset, Tensor seq_len) -> ()``
    Writes ``past`` in place (ATB's ``present`` is ``past``, so nothing is returned).
``paged_cache_load(key_cache, value_cache, block_table, context_lens, *, int kv_cache_cfg=0, bool cumsum=False, Tensor? seq_starts=None) -> (Tensor, Tensor)``
    Allocates ``key`` and ``value``; their row count depends on ``context_lens`` (an unbacked
    size under ``torch.compile``).
``paged_cache_load.into(..., *, ..., Tensor(a!) key, Tensor(b!) value) -> ()``
    Writes the given ``key`` and ``value`` in place; ``torch.ops.ascend_kv.paged_cache_load``
    picks this overload when both are passed. Rows not written keep their values, so the outputs
    are read-write arguments, not write-only ``out=`` buffers.

One implementation serves every device (``CompositeExplicitAutograd``): the public function of
:mod:`ascend_kv.ops`, so the checks and the backend choice of :mod:`ascend_kv.dispatch` apply
unchanged (the NPU backend calls the compiled library's own operators). The operations are
not differentiable: the ``Autograd`` key falls through to that implementation, which runs
below autograd (the pattern ``opcheck`` asks of non-differentiable operators, in one Python call
instead of two).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch

from . import checks, ops
from .dtypes import CACHE_DTYPES

NAMESPACE = "ascend_kv"

_LOAD_ARGS = (
    "Tensor key_cache, Tensor value_cache, Tensor block_table, Tensor context_lens, *, "
    "int kv_cache_cfg=0, bool cumsum=False, Tensor? seq_starts=None"
)
SCHEMAS = {
    "kv_cache": "kv_cache(Tensor new_kv, int layer_id, Tensor(a!) past, Tensor token_offset, Tensor seq_len) -> ()",
    "paged_cache_load": f"paged_cache_load({_LOAD_ARGS}) -> (Tensor, Tensor)",
    "paged_cache_load.into": f"paged_cache_load.into({_LOAD_ARGS}, Tensor(a!) key, Tensor(b!) value) -> ()",
}

_LIB = torch.library.Library(NAMESPACE, "DEF")
_Result = TypeVar("_Result")


def _below_autograd(impl: Callable[..., _Result]) -> Callable[..., _Result]:
    """``impl`` run below the autograd key: the operations are not differentiable, so autograd only
    passes them through (``fallthrough_kernel``) and never records them."""

    @functools.wraps(impl)
    def run(*args: object, **kwargs: object) -> _Result:
        with torch._C._AutoDispatchBelowAutograd():
            return impl(*args, **kwargs)

    return run


def _kv_cache(
    new_kv: torch.Tensor, layer_id: int, past: torch.Tensor, token_offset: torch.Tensor, seq_len: torch.Tensor
) -> None:
    """``ascend_kv.kv_cache`` without a result (the schema returns nothing)."""
    ops.kv_cache(new_kv, layer_id, past, token_offset, seq_len)


def _paged_cache_load(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    *,
    kv_cache_cfg: int = 0,
    cumsum: bool = False,
    seq_starts: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ascend_kv.paged_cache_load`` with new outputs."""
    return ops.paged_cache_load(
        key_cache, value_cache, block_table, context_lens, kv_cache_cfg=kv_cache_cfg, cumsum=cumsum, seq_starts=seq_starts,
    )


def _paged_cache_load_into(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    *,
    kv_cache_cfg: int = 0,
    cumsum: bool = False,
    seq_starts: torch.Tensor | None = None,
    key: torch.Tensor,
    value: torch.Tensor,
) -> None:
    """``ascend_kv.paged_cache_load`` into the given outputs, without a result."""
    ops.paged_cache_load(
        key_cache, value_cache, block_table, context_lens,
        kv_cache_cfg=kv_cache_cfg, cumsum=cumsum, seq_starts=seq_starts, key=key, value=value,
    )


def _paged_cache_load_fake(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    *,
    kv_cache_cfg: int = 0,
    cumsum: bool = False,
    seq_starts: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """New outputs ``[rows, *row]`` with ``rows`` unknown until run (``0 <= rows <= 2**31 - 1``).

    The caches' dtypes and shapes are checked here already, by the same rules as a real call.
    """
    layout = checks.kv_cache_cfg_argument(kv_cache_cfg)
    checks.require_dtype("key_cache", key_cache, CACHE_DTYPES)
    checks.require_dtype("value_cache", value_cache, CACHE_DTYPES)
    _, _, key_row, value_row = checks.check_cache_shapes(layout, key_cache, value_cache)
    rows = torch.library.get_ctx().new_dynamic_size(min=0, max=checks.INT32_MAX)
    return key_cache.new_empty((rows, *key_row)), value_cache.new_empty((rows, *value_row))


def _returns_nothing(*args: object, **kwargs: object) -> None:
    """Fake implementation of the in-place operators: they have no outputs to describe."""


for _name, _schema in SCHEMAS.items():
    _LIB.define(_schema)
    _LIB.impl(_name, torch.library.fallthrough_kernel, "Autograd")

_LIB.impl("kv_cache", _below_autograd(_kv_cache), "CompositeExplicitAutograd")
_LIB.impl("paged_cache_load", _below_autograd(_paged_cache_load), "CompositeExplicitAutograd")
_LIB.impl("paged_cache_load.into", _below_autograd(_paged_cache_load_into), "CompositeExplicitAutograd")
torch.library.register_fake(f"{NAMESPACE}::kv_cache", _returns_nothing, lib=_LIB)
torch.library.register_fake(f"{NAMESPACE}::paged_cache_load", _paged_cache_load_fake, lib=_LIB)
torch.library.register_fake(f"{NAMESPACE}::paged_cache_load.into", _returns_nothing, lib=_LIB)
