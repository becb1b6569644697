"""The block operators ``torch.ops.ascend_kv.block_copy``, ``.copy_blocks`` and ``.swap_blocks``:
schemas and one implementation per device, as :mod:`ascend_kv.operators.library` has for the others.

``block_copy`` and ``copy_blocks`` are one operation (ATB BlockCopyOperation) in two argument
forms: both check into a :class:`~ascend_kv.rules.forms.BlockCopyArgs` over every cache they write
(all layers of a ``copy_blocks``), which one backend call copies: on the host the fallback's
copier (or the kernels' host build when ``sim`` is chosen), on a device the AscendC kernel
(NPU, where the policy allows) or the device fallback, neither reading an index value back.
``swap_blocks`` moves blocks between caches, on one device or two, by the runtime's copies;
its ``block_mapping`` is on the host, so its values are always checked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..cpu_fallback import block_copy as host_blocks
from ..rules import block_copy as block_rules
from ..rules import formats
from ..rules.forms import BlockCopyArgs, BlockCopyPlan
from . import run
from .registration import NAMESPACE, Implementations, register

SCHEMAS = {
    "block_copy": "block_copy(Tensor(a!) key_cache, Tensor(b!)? value_cache, Tensor src_block_indices, "
                  "Tensor dst_block_indices, Tensor cum_sum) -> ()",
    "copy_blocks": "copy_blocks(Tensor(a!)[] key_caches, Tensor(b!)[] value_caches, Tensor block_mapping) -> ()",
    "swap_blocks": "swap_blocks(Tensor src, Tensor(a!) dst, Tensor block_mapping) -> ()",
}

_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")


def _run(args: BlockCopyArgs, plan: Callable[[BlockCopyArgs], BlockCopyPlan]) -> None:
    """One backend call for every cache: on the host with its checked ``plan(args)``; on a device
    after the value rules only where :func:`.run.reads_values` says so."""
    if not args.caches:
        return
    if args.device.type == "cpu":
        checked = plan(args)
        run.on_host(args, lambda: host_blocks.block_copy(checked))
        return
    if run.reads_values(args):
        plan(args)
    run.on_device(args)


def _block_copy_cpu(*arguments: Any) -> None:
    _run(block_rules.block_copy_args(*arguments), block_rules.block_copy_plan)


def _block_copy_device(key_cache: torch.Tensor, value_cache: torch.Tensor | None, *index: torch.Tensor) -> None:
    formats.require_base_formats({"key_cache": key_cache, "value_cache": value_cache})
    _run(block_rules.block_copy_args(key_cache, value_cache, *index), block_rules.block_copy_plan)


def _block_copy_fake(*arguments: Any) -> None:
    block_rules.block_copy_args(*arguments, shapes_only=True)


def _copy_blocks_cpu(key_caches: Sequence[torch.Tensor], value_caches: Sequence[torch.Tensor],
                     block_mapping: torch.Tensor) -> None:
    _run(block_rules.copy_blocks_args(key_caches, value_caches, block_mapping), block_rules.copy_blocks_plan)


def _copy_blocks_device(key_caches: Sequence[torch.Tensor], value_caches: Sequence[torch.Tensor],
                        block_mapping: torch.Tensor) -> None:
    named: dict[str, torch.Tensor | None] = {f"key_caches[{i}]": c for i, c in enumerate(key_caches)}
    named.update({f"value_caches[{i}]": c for i, c in enumerate(value_caches)})
    formats.require_base_formats(named)
    _run(block_rules.copy_blocks_args(key_caches, value_caches, block_mapping), block_rules.copy_blocks_plan)


def _copy_blocks_fake(key_caches: Sequence[torch.Tensor], value_caches: Sequence[torch.Tensor],
                      block_mapping: torch.Tensor) -> None:
    block_rules.copy_blocks_args(key_caches, value_caches, block_mapping, shapes_only=True)


def _swap_blocks(src: torch.Tensor, dst: torch.Tensor, block_mapping: torch.Tensor) -> None:
    formats.require_base_formats({"src": src, "dst": dst})
    host_blocks.swap_blocks(block_rules.swap_blocks(src, dst, block_mapping))


def _swap_blocks_fake(src: torch.Tensor, dst: torch.Tensor, block_mapping: torch.Tensor) -> None:
    block_rules.swap_blocks(src, dst, block_mapping, shapes_only=True)


_IMPLEMENTATIONS: Implementations = {
    "block_copy": (_block_copy_cpu, _block_copy_device, _block_copy_fake),
    "copy_blocks": (_copy_blocks_cpu, _copy_blocks_device, _copy_blocks_fake),
    "swap_blocks": (_swap_blocks, _swap_blocks, _swap_blocks_fake),
}

register(_LIB, SCHEMAS, _IMPLEMENTATIONS)
