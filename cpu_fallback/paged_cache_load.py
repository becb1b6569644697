"""Paged cache load: every (batch entry, block) run of tokens into the outputs, by the fastest way that applies.

Each cache is gathered into its output on its own, by the first path that applies
(the fastest first; docs/benchmarks.md has the measurements):

``native``
    Host tensors, the compiled copier built, token rows (ND) or 32-byte fractal rows (NZ)
    contiguous, output rows contiguous and not overlapping: one C call copies every run.
``slices``
    Runs of at least :data:`SLICE_MIN_ROWS` tokens on average: one ``copy_`` per run (NZ: of
    the run's ``[T // E, rows, E]`` piece, transposed).
``rows`` (ND only)
    The cache viewable as ``[num_blocks * block_size, row]`` and the written output rows
    contiguous: one ``index_select`` with precomputed token rows straight into the output.
``gather``
    Anything else: one advanced-indexing gather and one assignment, which honour any strides.
"""

from __future__ import annotations

import math

import torch

from ascend_kv.api.params import KvCacheCfg
from ascend_kv.rules.forms import PagedLoadArgs, PagedLoadPlan

from . import native
from .runs import BlockRuns, block_runs, token_rows
from .strides import merged_rows, rows_contiguous
from .wide import bit_views, same_width_views

ND, NZ = KvCacheCfg.K_CACHE_V_CACHE_ND, KvCacheCfg.K_CACHE_V_CACHE_NZ

#: Bytes written (key and value together) from which the copier streams both outputs past the
#: CPU caches (:func:`.native.copy_runs`): attention reads the outputs next, so outputs the
#: caches could hold go through them; the total decides, as the caches would hold the total
#: (the threshold is measured: docs/benchmarks.md, "How the fallback chooses").
STREAM_MIN_BYTES = 6 << 20

#: Per layout, the mean tokens per run from which a ``copy_`` per run beats one indexed gather
#: (measured: docs/benchmarks.md, "How the fallback chooses").
SLICE_MIN_ROWS = {ND: 112, NZ: 8}


def paths(plan: PagedLoadPlan) -> tuple[str, str]:
    """The names of the paths :func:`paged_cache_load` takes for the key and the value."""
    return _paths(plan, _native_routes(plan.args))


def _paths(plan: PagedLoadPlan, routes: tuple[native.Steps | None, native.Steps | None]) -> tuple[str, str]:
    args = plan.args
    key, value = args.outputs()
    return _path(plan, args.key_cache, key, routes[0]), _path(plan, args.value_cache, value, routes[1])


def paged_cache_load(plan: PagedLoadPlan) -> None:
    """Gather every requested token of both caches into the outputs ``key`` and ``value``."""
    num_tokens = plan.num_tokens
    if num_tokens == 0:
        return
    args, routes, runs = plan.args, _native_routes(plan.args), block_runs(plan)
    written = num_tokens * _token_bytes(args)
    stream_min_bytes = 0 if written >= STREAM_MIN_BYTES else STREAM_MIN_BYTES     # both outputs, or neither
    if None in routes:  # a torch path runs: no path choice needed where the copier takes both (the usual case)
        ways, args = _paths(plan, routes), bit_views(args)                        # the copier moves bytes
    else:
        ways = ("native", "native")
    layout, block_size = args.geometry.layout, args.geometry.block_size
    rows = slice(plan.first_row, plan.first_row + num_tokens)
    for way, route, cache, out in zip(ways, routes, (args.key_cache, args.value_cache), args.outputs()):
        if way == "native":
            assert route is not None                                              # _path() checked
            _native(route, cache, out, runs, stream_min_bytes)
        elif way == "slices":
            _slices(layout, cache, out, runs)
        elif way == "rows":
            tokens = merged_rows(cache)
            assert tokens is not None                                             # _path() checked
            src, dst = same_width_views(tokens, out[rows].flatten(1))
            index = torch.from_numpy(token_rows(runs, block_size)).to(cache.device)
            torch.index_select(src, 0, index, out=dst)
        else:
            out[rows] = _gather(layout, cache, runs, block_size)


def _path(plan: PagedLoadPlan, cache: torch.Tensor, out: torch.Tensor, route: native.Steps | None) -> str:
    layout, block_size = plan.args.geometry.layout, plan.args.geometry.block_size
    if route is not None:
        return "native"
    if plan.num_tokens >= SLICE_MIN_ROWS[layout] * sum(-(-n // block_size) for n in plan.lens):  # mean per run
        return "slices"
    if layout == ND and merged_rows(cache) is not None and rows_contiguous(out) and out.stride(0) == _row_numel(out):
        return "rows"
    return "gather"


def _native_routes(args: PagedLoadArgs) -> tuple[native.Steps | None, native.Steps | None]:
    """For the key and the value, the copier's route when it takes them, else None; what the
    structure decides is kept per call signature (``args.derived``)."""
    if not native.AVAILABLE:
        return None, None
    key, value = args.outputs()
    if "native" not in args.derived:
        args.derived["native"] = (_native_route(args.layout, args.key_cache, key),
                                  _native_route(args.layout, args.value_cache, value))
    routes: tuple[native.Steps | None, native.Steps | None] = args.derived["native"]
    return routes


def _native_route(layout: KvCacheCfg, cache: torch.Tensor, out: torch.Tensor) -> native.Steps | None:
    """The route when both tensors are on the host, the copier's items contiguous in ``cache`` and
    ``out``'s rows contiguous (its elements apart: require_writable)."""
    if not (cache.is_cpu and out.is_cpu):
        return None
    if not (cache.is_contiguous() and out.is_contiguous()):                      # the usual case, cheaply
        items_contiguous = rows_contiguous(cache[:, 0]) if layout == ND else cache.stride(3) == 1
        if not (items_contiguous and rows_contiguous(out)):
            return None
    size = cache.element_size()
    block, row = cache.stride(0) * size, out.stride(0) * size
    if layout == ND:                                                             # items: token rows
        return native.Steps(block, row, 0, _row_numel(out) * size, cache.stride(1) * size, row, 1, 0, 0)
    fractal = cache.shape[3] * size                                              # items: 32-byte fractal rows
    return native.Steps(block, row, 0, fractal, cache.stride(2) * size, row, cache.shape[1], cache.stride(1) * size,
                        fractal)


def _native(steps: native.Steps, cache: torch.Tensor, out: torch.Tensor, runs: BlockRuns, stream_min_bytes: int) -> None:
    """Every run in one copier call: from slot 0 of its block to its first output row."""
    native.copy_with(steps, cache.data_ptr(), out.data_ptr(), runs.block, runs.out_start, runs.rows, stream_min_bytes)


def _slices(layout: KvCacheCfg, cache: torch.Tensor, out: torch.Tensor, runs: BlockRuns) -> None:
    for block, start, rows in zip(*runs):
        if layout == ND:
            out[start : start + rows].copy_(cache[block, :rows])
        else:                                                                    # [rows, T//E, E] <- [T//E, rows, E]
            out[start : start + rows].unflatten(1, (cache.shape[1], cache.shape[3])).copy_(cache[block, :, :rows].transpose(0, 1))


def _token_bytes(args: PagedLoadArgs) -> int:
    """Bytes one token writes into the outputs together; kept per call signature (``args.derived``)."""
    if "token_bytes" not in args.derived:
        args.derived["token_bytes"] = sum(map(_row_bytes, args.outputs()))
    token_bytes: int = args.derived["token_bytes"]
    return token_bytes


def _row_numel(out: torch.Tensor) -> int:
    return math.prod(out.shape[1:])


def _row_bytes(out: torch.Tensor) -> int:
    return _row_numel(out) * out.element_size()


def _gather(layout: KvCacheCfg, cache: torch.Tensor, runs: BlockRuns, block_size: int) -> torch.Tensor:
    """Token rows ``[n, num_heads, head_size]`` (ND) or ``[n, T]`` (NZ) of ``cache``, in output order."""
    token = torch.from_numpy(token_rows(runs, block_size)).to(cache.device)
    block, slot = token // block_size, token % block_size
    if layout == ND:
        return cache[block, slot]
    return cache[block, :, slot, :].reshape(len(token), -1)
