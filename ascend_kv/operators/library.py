"""The operator library: ``torch.ops.ascend_kv.*``, in C++, and the parts of it only Python can do.

The operators, their schemas and every implementation live in C++ (``csrc/``, with the CPU
paths and the device fallback in ``cpu_fallback/``): :func:`load` builds the library against the
installed torch on first use (cached, :mod:`.build`) and loads it. Python then gives it what only
Python has (docs/architecture.md):

- the answers the C++ side asks for, through three operators it declares and Python implements:
  ``_environment`` (the settings' environment variables), ``_decide`` (the dispatch policy:
  support matrix, SoC, kernel library, warnings and errors) and ``_storage_format`` (an NPU
  tensor's storage format, from torch_npu, where no C++ hook tells it);
- the fakes of the allocating ``paged_cache_load`` and of ``block_ranges``, whose lengths are
  data-dependent (an unbacked size, which C++ cannot make);
- the compile rule (:mod:`.functionalization`), imported and registered the first time a call is
  traced, not by ``import ascend_kv``.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from . import build

NAMESPACE = "ascend_kv"
#: The row counts an allocating load can have (the kernels' arithmetic is 32-bit).
INT32_MAX = 2**31 - 1

_lock = threading.Lock()
_loaded: Path | None = None
_python_parts: list[torch.library.Library] = []


def source_root() -> Path:
    """The folder holding ``csrc/``, ``cpu_fallback/`` and ``ascendc/``: the repository (an editable
    install), or ``ascend_kv/_sources`` of an installed wheel."""
    package = Path(__file__).resolve().parent.parent
    for root in (package.parent, package / "_sources"):
        if (root / "csrc" / "registration.cpp").is_file():
            return root
    raise ImportError(f"ascend_kv: the operator library's C++ sources (csrc/) were not found next to {package}")


def definition() -> build.Library:
    """The operator library's sources and build settings."""
    root = source_root()
    sources = sorted([*(root / "csrc").rglob("*.cpp"), *(root / "cpu_fallback").glob("*.cpp")])
    headers = sorted([*(root / "csrc").rglob("*.h"), *(root / "cpu_fallback").glob("*.h"),
                      root / "ascendc" / "host" / "kernel_library.h"])
    return build.Library("ascend_kv_ops", "the operator library", tuple(sources), (root,), tuple(headers),
                         shared_units=True)


def load() -> Path:
    """Build (once per torch and source) and load the operator library, then register its Python parts."""
    global _loaded
    with _lock:
        if _loaded is None:
            path = build.build(definition())
            torch.ops.load_library(str(path))
            _register_python_parts()
            _loaded = path
    return _loaded


def _register_python_parts() -> None:
    from ..dispatch import bridge

    implementations = torch.library.Library(NAMESPACE, "IMPL")
    for name, function in (("_environment", bridge.environment), ("_decide", bridge.decide),
                           ("_storage_format", bridge.storage_format), ("_on_trace", bridge.on_trace)):
        implementations.impl(name, function, "CompositeExplicitAutograd")
    _python_parts.append(implementations)
    torch.library.register_fake(f"{NAMESPACE}::paged_cache_load", _allocating_load_fake)
    # swap_blocks_batch and batch_memcpy write through raw addresses, not through a tensor argument: a
    # compiled graph keeps them.
    torch.fx.node.has_side_effect(torch.ops.ascend_kv.swap_blocks_batch.default)
    torch.fx.node.has_side_effect(torch.ops.ascend_kv.batch_memcpy.default)
    torch.library.register_fake(f"{NAMESPACE}::paged_cache_load.dequant", _allocating_dequant_fake)
    torch.library.register_fake(f"{NAMESPACE}::block_ranges", _block_ranges_fake)


def _allocating_load_fake(key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
                          context_lens: torch.Tensor, kv_cache_cfg: int = 0, cumsum: bool = False,
                          seq_starts: torch.Tensor | None = None, zero_fill: bool = False
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """New outputs ``[rows, *row]`` with ``rows`` unknown until run (``0 <= rows <= 2**31 - 1``): the
    C++ rules check the call and give the outputs' rows (as outputs of no row), first, so a call
    they refuse raises their error."""
    from ..dispatch import bridge

    bridge.on_trace()
    key, value = torch.ops.ascend_kv._paged_cache_load_outputs(key_cache, value_cache, block_table, context_lens,
                                                               kv_cache_cfg, cumsum, seq_starts, zero_fill, 0)
    rows = torch.library.get_ctx().new_dynamic_size(min=0, max=INT32_MAX)
    return key.new_empty((rows, *key.shape[1:])), value.new_empty((rows, *value.shape[1:]))


def _allocating_dequant_fake(key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
                             context_lens: torch.Tensor, kv_cache_cfg: int = 0, cumsum: bool = False,
                             seq_starts: torch.Tensor | None = None, zero_fill: bool = False,
                             *quant: object) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_allocating_load_fake` of the dequantizing overload (``quant``: its scales and ``out_dtype``)."""
    from ..dispatch import bridge

    bridge.on_trace()
    key, value = torch.ops.ascend_kv._paged_cache_load_outputs.dequant(
        key_cache, value_cache, block_table, context_lens, kv_cache_cfg, cumsum, seq_starts, zero_fill, *quant, 0)
    rows = torch.library.get_ctx().new_dynamic_size(min=0, max=INT32_MAX)
    return key.new_empty((rows, *key.shape[1:])), value.new_empty((rows, *value.shape[1:]))


def _block_ranges_fake(src_bases: torch.Tensor, *tables: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three int64 lists of a length known only once the tables are read (their ranges merged)."""
    ranges = torch.library.get_ctx().new_dynamic_size()
    return tuple(src_bases.new_empty((ranges,), dtype=torch.int64) for _ in range(3))  # type: ignore[return-value]


def cache_dtypes() -> tuple[torch.dtype, ...]:
    """The element types every operation takes (the C++ rules' table)."""
    return tuple(getattr(torch, name) for name in torch.ops.ascend_kv._cache_dtypes())


def atb_cache_dtypes() -> tuple[torch.dtype, ...]:
    """The element types Huawei's ATB documents for these operations."""
    return tuple(getattr(torch, name) for name in torch.ops.ascend_kv._atb_cache_dtypes())
