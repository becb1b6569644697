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

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..backends import kernel_domain, npu
from ..cpu_fallback import block_copy as host_blocks
from ..cpu_fallback import on_device
from ..dispatch import policy
from ..rules import block_checks, checks
from ..rules.forms import BlockCopyArgs, BlockCopyCall
from . import library, upload

BLOCK_COPY = "BlockCopyOperation"

SCHEMAS = {
    "block_copy": "block_copy(Tensor(a!) key_cache, Tensor(b!)? value_cache, Tensor src_block_indices, "
                  "Tensor dst_block_indices, Tensor cum_sum) -> ()",
    "copy_blocks": "copy_blocks(Tensor(a!)[] key_caches, Tensor(b!)[] value_caches, Tensor block_mapping) -> ()",
    "swap_blocks": "swap_blocks(Tensor src, Tensor(a!) dst, Tensor block_mapping) -> ()",
}

_LIB = torch.library.Library(library.NAMESPACE, "FRAGMENT")


def decision(args: BlockCopyArgs) -> policy.Decision:
    """What runs a checked block copy, and why (the decision the implementations take)."""
    return policy.decide(BLOCK_COPY, _device(args), lambda: kernel_domain.block_copy_outside_reason(args))


def _device(args: BlockCopyArgs) -> torch.device:
    return args.caches[0].device if args.caches else args.dst.device


def _run(args: BlockCopyArgs, call: BlockCopyCall | None) -> None:
    """One backend call for every cache: ``call`` holds the checked values of host index tensors."""
    if not args.caches:
        return
    device = _device(args)
    if device.type == "cpu":
        backend = policy.choose(BLOCK_COPY, device, lambda: kernel_domain.block_copy_outside_reason(args))
        if backend == "sim":
            importlib.import_module("ascend_kv.backends.sim").block_copy(args)
        else:
            assert call is not None  # host index values are always read
            host_blocks.block_copy(call)
        return
    args = upload.index_tensors_on_device(args, device)
    backend = policy.choose(BLOCK_COPY, device, lambda: kernel_domain.block_copy_outside_reason(args))
    (npu if backend == "npu" else on_device).block_copy(args)


def _block_copy_cpu(*arguments: object) -> None:
    args, call = block_checks.block_copy(*arguments)
    _run(args, call)


def _block_copy_device(*arguments: Any) -> None:
    key_cache, value_cache, *index = arguments
    checks.require_base_formats({"key_cache": key_cache, "value_cache": value_cache})
    args, call = block_checks.block_copy(*arguments, read_values=library.reads_values(*index))
    _run(args, call)


def _block_copy_fake(*arguments: object) -> None:
    block_checks.block_copy(*arguments, read_values=False, shapes_only=True)


def _copy_blocks_cpu(key_caches: Sequence[torch.Tensor], value_caches: Sequence[torch.Tensor],
                     block_mapping: torch.Tensor) -> None:
    args, call = block_checks.copy_blocks(key_caches, value_caches, block_mapping)
    _run(args, call)


def _copy_blocks_device(key_caches: Sequence[torch.Tensor], value_caches: Sequence[torch.Tensor],
                        block_mapping: torch.Tensor) -> None:
    named: dict[str, torch.Tensor | None] = {f"key_caches[{i}]": c for i, c in enumerate(key_caches)}
    named.update({f"value_caches[{i}]": c for i, c in enumerate(value_caches)})
    checks.require_base_formats(named)
    args, call = block_checks.copy_blocks(key_caches, value_caches, block_mapping,
                                          read_values=library.reads_values(block_mapping))
    _run(args, call)


def _copy_blocks_fake(key_caches: Sequence[torch.Tensor], value_caches: Sequence[torch.Tensor],
                      block_mapping: torch.Tensor) -> None:
    block_checks.copy_blocks(key_caches, value_caches, block_mapping, read_values=False, shapes_only=True)


def _swap_blocks(src: torch.Tensor, dst: torch.Tensor, block_mapping: torch.Tensor) -> None:
    checks.require_base_formats({"src": src, "dst": dst})
    host_blocks.swap_blocks(block_checks.swap_blocks(src, dst, block_mapping))


def _swap_blocks_fake(src: torch.Tensor, dst: torch.Tensor, block_mapping: torch.Tensor) -> None:
    block_checks.swap_blocks(src, dst, block_mapping, read_values=False, shapes_only=True)


_Implementation = Callable[..., Any]
_IMPLEMENTATIONS: dict[str, tuple[_Implementation, _Implementation, _Implementation]] = {
    "block_copy": (_block_copy_cpu, _block_copy_device, _block_copy_fake),
    "copy_blocks": (_copy_blocks_cpu, _copy_blocks_device, _copy_blocks_fake),
    "swap_blocks": (_swap_blocks, _swap_blocks, _swap_blocks_fake),
}

library.register(_LIB, SCHEMAS, _IMPLEMENTATIONS)
