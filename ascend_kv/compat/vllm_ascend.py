"""vllm-ascend's own custom ops, ``torch.ops._C_ascend.*``, on a CPU (or the tests' fake NPU), run by ascend_kv.

vllm-ascend's sparse-attention code (DeepSeek-V3.2/V4's DSA and SFA caches) writes its caches
through ``torch.ops._C_ascend.npu_scatter_nd_update_v2`` and offloads blocks through
``torch.ops._C_ascend.swap_blocks_batch``; both come from vllm-ascend's compiled library, which
exists only on an Ascend machine. :func:`register` defines them under vllm-ascend's schemas
(exactly: ``csrc/torch_binding.cpp`` of vllm-project/vllm-ascend) with ascend_kv's operators behind
them, so that code runs unchanged in a CPU test with real numbers:

- ``npu_scatter_nd_update_v2(Tensor(a!) var, Tensor indices, Tensor update) -> ()``:
  :func:`ascend_kv.scatter_nd_update` (flat slots ``[n]``/``[n, 1]`` or ``(block, offset)`` pairs
  ``[n, 2]``, ``var`` of any strides; docs/semantics.md §15.1);
- ``swap_blocks_batch(Tensor x, Tensor y, Tensor z, int direction) -> ()``: the pointer-table
  batch copy of :func:`ascend_kv.swap_blocks_batch` (host tables; docs/semantics.md §11.3).

When vllm-ascend's own library is loaded (any ``_C_ascend`` operator this module did not define),
:func:`register` refuses with a ``RuntimeError``: its ops are the ones that run on the NPU.

Examples
--------
>>> from ascend_kv.compat import vllm_ascend
>>> vllm_ascend.register()
>>> cache = torch.zeros(3, 4, 1, 8)[:, :, :, :4]             # a column slice: strided
>>> torch.ops._C_ascend.npu_scatter_nd_update_v2(cache, torch.tensor([[2, 1], [-1, -1]]), torch.ones(2, 1, 4))
>>> cache[2, 1].sum().item()
4.0
"""

from __future__ import annotations

import torch

from .. import scatter_nd_update
from . import torch_npu

#: vllm-ascend's library and the schemas of the ops :func:`register` defines in it.
NAMESPACE = "_C_ascend"
SCHEMAS = {
    "npu_scatter_nd_update_v2": "npu_scatter_nd_update_v2(Tensor(a!) var, Tensor indices, Tensor update) -> ()",
    "swap_blocks_batch": "swap_blocks_batch(Tensor x, Tensor y, Tensor z, int direction) -> ()",
}

_library: torch.library.Library | None = None


def _scatter_nd_update_v2(var: torch.Tensor, indices: torch.Tensor, update: torch.Tensor) -> None:
    scatter_nd_update(var, indices, update)


def _swap_blocks_batch(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, direction: int) -> None:
    torch_npu.swap_blocks_batch(x, y, z, direction)


def _defined_elsewhere() -> list[str]:
    """The ``_C_ascend`` operators in this process that :func:`register` did not define."""
    ours = {f"{NAMESPACE}::{name}" for name in SCHEMAS} if _library is not None else set()
    return sorted(name for name in torch._C._dispatch_get_all_op_names()
                  if name.split(".")[0].startswith(f"{NAMESPACE}::") and name.split(".")[0] not in ours)


def register() -> None:
    """Define ``torch.ops._C_ascend.npu_scatter_nd_update_v2`` and ``.swap_blocks_batch`` with ascend_kv
    behind them (once per process; later calls do nothing).

    The scatter runs on any device through its CompositeExplicitAutograd kernel (and on meta and
    fake tensors, so ``torch.compile`` traces it); ``swap_blocks_batch`` takes host tables, as
    vllm-ascend's registers it for the CPU key.

    Raises
    ------
    RuntimeError
        vllm-ascend's own ``_C_ascend`` library is loaded (naming one of its operators).
    """
    global _library
    others = _defined_elsewhere()
    if others:
        raise RuntimeError(f"vllm-ascend's own library is loaded (torch.ops.{others[0].replace('::', '.')} exists): "
                           "its _C_ascend ops run on the NPU; ascend_kv.compat.vllm_ascend defines them only "
                           "where it is absent (a CPU test)")
    if _library is not None:
        return
    library = torch.library.Library(NAMESPACE, "DEF")
    for schema in SCHEMAS.values():
        library.define(schema)
    library.impl("npu_scatter_nd_update_v2", _scatter_nd_update_v2, "CompositeExplicitAutograd")
    library.impl("npu_scatter_nd_update_v2", _scatter_nd_update_v2, "Meta")
    library.impl("swap_blocks_batch", _swap_blocks_batch, "CPU")
    _library = library


__all__ = ["NAMESPACE", "SCHEMAS", "register"]
