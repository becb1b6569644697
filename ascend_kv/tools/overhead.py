"""``ascend-kv bench --overhead``: the host cost of one call, as a multiple of a bare ``index_copy_``.

Decode-sized calls whose bytes cost nothing (8 sequences x 1 token, 1 head x 16, float16), each
public function and its ``torch.ops.ascend_kv`` operator, timed against a bare ``index_copy_`` of
8 rows of 16 with precomputed row numbers and against a do-nothing operator with Python
implementations (``torch.library.Library`` DEF, CPU and PrivateUse1, autograd falling through: the
floor of a Python-implemented operator, as ascend_kv's were before they were C++); and the decode ``kv_cache`` of 64 sequences x 1 token,
hidden 1024, against an ``index_copy_`` of its 64 rows. On the CPU (index tensors on the host)
and, in a source checkout, on the fake NPU of ``tests/fake_npu`` (index tensors on the device),
taking the kernels' route with a kernel library whose launches do nothing but count (C++, built
once and cached): a table of do-nothing entries as the kernel library (this design), or, for an
older tree whose kernel library registered ``torch.ops`` operators, the kernels' host build with
those operators' NPU kernels replaced by one do-nothing C++ kernel while the calls are timed.
So the NPU rows are the host path alone, on the route a real NPU call takes. Each row says where
the call ran by the operators' own counts (``torch.ops.ascend_kv._runs()``: host paths, sim,
kernels, device fallback; ``-`` where the tree has no counts).

Times are thread CPU time (``time.thread_time``) on one torch thread, the fastest of interleaved
rounds: each round times every call of a set once, round robin, so the ratios come from the same
rounds. Warm: ``--calls`` back-to-back calls per timing. After a sweep: one call after writing
``--sweep-mb`` MB (larger than the last-level cache), as a serving step calls after the
model's weights streamed through the caches.

The module needs only ``torch`` (and its C++ extension build, for the fake NPU rows) and an
importable ``ascend_kv``, and calls only the public functions and their operators, so it also
measures another tree:
``python ascend_kv/tools/overhead.py`` times whichever ascend_kv its Python imports, and
``--compare OLD.json NEW.json`` prints two runs side by side (``scripts/overhead_against.sh REV``).

Usage: ``ascend-kv bench --overhead [--rounds N] [--calls N] [--swept-rounds N] [--sweep-mb N]
[--no-npu] [--tiny] [--json PATH]``; docs/benchmarks.md shows a run.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

import ascend_kv

#: Per call measured, its target and goal as a multiple of the bare ``index_copy_`` of its set (docs/benchmarks.md, "The host cost of a call").
TARGETS = {"kv_cache": (6.0, 2.0), "reshape_and_cache": (6.0, 2.0), "paged_cache_load": (8.0, 3.0),
           "decode kv_cache": (1.15, 1.0)}
#: The goal for a fake-NPU row, as a multiple of the same call on the CPU.
NPU_GOAL = 2.0
#: The SoC the fake NPU reports while the NPU rows run: one where the kernels run.
NPU_SOC = "Ascend910B3"
BARE = "bare index_copy_"
NOOP = "do-nothing operator"
NOOP_NAMESPACE = "ascend_kv_overhead"
FAKE_NPU = Path("tests") / "fake_npu" / "__init__.py"
#: Where the operators count calls, in the order of ``torch.ops.ascend_kv._runs()`` (trees that have it).
RAN_PLACES = ("host paths", "sim", "kernels", "device fallback")


@dataclass
class Timed:
    """One call to time: ``run()`` calls it once."""

    set: str
    call: str
    device: str
    run: Callable[[], object]
    target: str | None = None          #: key of :data:`TARGETS`
    ran: str | None = None             #: where a trial call ran (:func:`_where`)


@dataclass
class Row:
    """What was measured of one :class:`Timed` (times in microseconds per call)."""

    set: str
    call: str
    device: str
    warm_us: float = math.nan
    warm_median_us: float = math.nan
    swept_us: float | None = None
    swept_median_us: float | None = None
    x_index_copy: float = math.nan
    swept_x_index_copy: float | None = None
    x_cpu: float | None = None                #: NPU rows: warm time / the CPU's of the same call
    swept_x_cpu: float | None = None
    target: float | None = None
    goal: float | None = None
    ran: str | None = None                    #: where the call ran (the operators' counts), None where not counted
    transfers: int = 0                        #: fake NPU: device-to-host transfers in all timed calls
    uploads: int = 0                          #: fake NPU: host-to-device copies in all timed calls
    launches_per_call: float | None = None    #: fake NPU: kernel library calls (the do-nothing ones) per call
    unavailable: str | None = None
    samples: dict[str, list[float]] = field(default_factory=dict)


# ----------------------------------------------------------------------------- timing


def sweeper(megabytes: int) -> Callable[[], object]:
    """A function that writes ``megabytes`` MB, evicting what the CPU caches held (nothing for 0)."""
    buffer = torch.zeros(megabytes * 2**20 // 8, dtype=torch.int64)
    return lambda: buffer.add_(1)


def _no_counts() -> tuple[int, int, int]:
    return 0, 0, 0


def time_rounds(runs: Sequence[Callable[[], object]], rounds: int, calls: int,
                sweep: Callable[[], object] | None = None,
                counts: Callable[[], tuple[int, ...]] = _no_counts) -> tuple[list[list[float]], list[list[int]]]:
    """Seconds per call of each run, ``rounds`` rounds, every run timed once per round (round robin):
    ``calls`` calls per timing, after ``sweep()`` when given. Also the change of ``counts()`` (read
    outside the timing) over all timed calls of each run."""
    seconds: list[list[float]] = [[] for _ in runs]
    counted = [[0] * len(counts()) for _ in runs]
    for _ in range(rounds):
        for i, run in enumerate(runs):
            if sweep is not None:
                sweep()
            before = counts()
            start = time.thread_time()
            for _ in range(calls):
                run()
            elapsed = time.thread_time() - start
            counted[i] = [total + b - a for total, a, b in zip(counted[i], before, counts())]
            seconds[i].append(elapsed / calls)
    return seconds, counted


# ----------------------------------------------------------------------------- the calls


def _noop_operator() -> Any:
    """A do-nothing operator of ``kv_cache``'s old schema, implemented in Python (once a process)."""
    ops = getattr(torch.ops, NOOP_NAMESPACE)
    if not hasattr(ops, "noop"):
        lib = torch.library.Library(NOOP_NAMESPACE, "DEF")
        lib.define("noop(Tensor new_kv, int layer_id, Tensor(a!) past, Tensor token_offset, Tensor seq_len) -> ()")
        lib.impl("noop", torch.library.fallthrough_kernel, "Autograd")
        for key in ("CPU", "PrivateUse1"):
            lib.impl("noop", lambda *args: None, key)
        _KEPT.append(lib)
    return ops.noop.default


_KEPT: list[torch.library.Library] = []   # the do-nothing operator's registration lives as long as the process


def _kv_cache(set_name: str, batch: int, hidden: int, max_seq_len: int, device: torch.device, target: str,
              floor: bool) -> list[Timed]:
    """``kv_cache`` writing one token per sequence into ``past [1, batch, max_seq_len, hidden]``, and
    the bare ``index_copy_`` of those rows (with ``floor``: the do-nothing operator too)."""
    g = torch.Generator().manual_seed(0)
    past = torch.zeros(1, batch, max_seq_len, hidden, dtype=torch.float16).to(device)
    new_kv = torch.randn(batch, hidden, generator=g).half().to(device)
    offset = torch.randint(1, max_seq_len + 1, (batch,), generator=g, dtype=torch.int32)
    seq_len = torch.ones(batch, dtype=torch.int32).to(device)
    rows = (torch.arange(batch) * max_seq_len + offset.long() - 1).to(device)
    offset = offset.to(device)
    flat = past[0].view(-1, hidden)
    kind = device.type
    calls = [Timed(set_name, BARE, kind, lambda: flat.index_copy_(0, rows, new_kv))]
    if floor:
        noop = _noop_operator()
        calls.append(Timed(set_name, NOOP, kind, lambda: noop(new_kv, 0, past, offset, seq_len)))
    op = torch.ops.ascend_kv.kv_cache.default
    return [*calls,
            Timed(set_name, "ascend_kv.kv_cache", kind, lambda: ascend_kv.kv_cache(new_kv, 0, past, offset, seq_len),
                  target),
            Timed(set_name, "torch.ops.ascend_kv.kv_cache.default", kind,
                  lambda: op(new_kv, 0, past, offset, seq_len), target)]


def _bare(set_name: str, device: torch.device) -> Timed:
    """The yardstick of the tiny sets: ``index_copy_`` of 8 rows of 16 float16 values."""
    return _kv_cache(set_name, 8, 16, 8, device, "kv_cache", floor=False)[0]


def _reshape_and_cache(set_name: str, device: torch.device) -> list[Timed]:
    """``reshape_and_cache`` of 8 tokens of 1 x 16 into ND caches ``[8, 16, 1, 16]``."""
    g = torch.Generator().manual_seed(1)
    key, value = (torch.randn(8, 1, 16, generator=g).half().to(device) for _ in range(2))
    key_cache, value_cache = (torch.zeros(8, 16, 1, 16, dtype=torch.float16).to(device) for _ in range(2))
    slots = torch.randperm(8 * 16, generator=g)[:8].to(torch.int32).to(device)
    op = torch.ops.ascend_kv.reshape_and_cache.default
    kind = device.type
    return [Timed(set_name, "ascend_kv.reshape_and_cache", kind,
                  lambda: ascend_kv.reshape_and_cache(key, value, key_cache, value_cache, slots), "reshape_and_cache"),
            Timed(set_name, "torch.ops.ascend_kv.reshape_and_cache.default", kind,
                  lambda: op(key, value, key_cache, value_cache, slots), "reshape_and_cache")]


def _paged_cache_load(set_name: str, device: torch.device) -> list[Timed]:
    """``paged_cache_load`` into given outputs, ND: 8 sequences x 3 tokens from caches ``[8, 16, 1, 16]``."""
    g = torch.Generator().manual_seed(2)
    key_cache, value_cache = (torch.randn(8, 16, 1, 16, generator=g).half().to(device) for _ in range(2))
    table = torch.randperm(8, generator=g).view(8, 1).to(torch.int32).to(device)
    lens = torch.full((8,), 3, dtype=torch.int32).to(device)
    key, value = (torch.zeros(24, 1, 16, dtype=torch.float16).to(device) for _ in range(2))
    nd = int(ascend_kv.KvCacheCfg.K_CACHE_V_CACHE_ND)
    op = torch.ops.ascend_kv.paged_cache_load.into
    kind = device.type
    # The operator called as its schema takes it fastest: positionally where the outputs and options
    # are positional, by keyword where they are keyword-only (the older schema overhead_against.sh may measure).
    if op._schema.arguments[4].kwarg_only:
        def operator_call() -> object:
            return op(key_cache, value_cache, table, lens, kv_cache_cfg=nd, key=key, value=value)
    else:
        def operator_call() -> object:
            return op(key_cache, value_cache, table, lens, key, value, nd)
    return [Timed(set_name, "ascend_kv.paged_cache_load(key=, value=)", kind,
                  lambda: ascend_kv.paged_cache_load(key_cache, value_cache, table, lens, kv_cache_cfg=nd,
                                                     key=key, value=value), "paged_cache_load"),
            Timed(set_name, "torch.ops.ascend_kv.paged_cache_load.into", kind, operator_call, "paged_cache_load")]


def _block_copy(set_name: str, device: torch.device) -> list[Timed]:
    """``block_copy`` and ``copy_blocks`` of 3 blocks to 3 others in K and V caches ``[8, 16, 1, 16]``."""
    key_cache, value_cache = (torch.zeros(8, 16, 1, 16, dtype=torch.float16).to(device) for _ in range(2))
    src, dst = torch.tensor([0, 1, 2], dtype=torch.int32).to(device), torch.tensor([3, 4, 5], dtype=torch.int32).to(device)
    cum_sum = torch.tensor([1, 2, 3], dtype=torch.int32).to(device)
    mapping = torch.tensor([[0, 3], [1, 4], [2, 5]], dtype=torch.int64).to(device)
    op, op_all = torch.ops.ascend_kv.block_copy.default, torch.ops.ascend_kv.copy_blocks.default
    kind = device.type
    return [Timed(set_name, "ascend_kv.block_copy", kind,
                  lambda: ascend_kv.block_copy(key_cache, value_cache, src, dst, cum_sum)),
            Timed(set_name, "torch.ops.ascend_kv.block_copy.default", kind,
                  lambda: op(key_cache, value_cache, src, dst, cum_sum)),
            Timed(set_name, "ascend_kv.copy_blocks", kind,
                  lambda: ascend_kv.copy_blocks([key_cache], [value_cache], mapping)),
            Timed(set_name, "torch.ops.ascend_kv.copy_blocks.default", kind,
                  lambda: op_all([key_cache], [value_cache], mapping))]


#: The sets, each timed on its own interleaved rounds: name, and the calls on one device.
SETS: list[tuple[str, Callable[[str, torch.device], list[Timed]]]] = [
    ("kv_cache 8x1 1x16", lambda name, device: _kv_cache(name, 8, 16, 8, device, "kv_cache", floor=True)),
    ("reshape_and_cache ND 8 tokens 1x16", lambda name, device: [_bare(name, device), *_reshape_and_cache(name, device)]),
    ("paged_cache_load into ND 8x3 1x16", lambda name, device: [_bare(name, device), *_paged_cache_load(name, device)]),
    ("block_copy 3 blocks 16x1x16", lambda name, device: [_bare(name, device), *_block_copy(name, device)]),
    ("decode kv_cache 64x1 h1024", lambda name, device: _kv_cache(name, 64, 1024, 64, device, "decode kv_cache",
                                                                   floor=False)),
]


def _build(name: str, make: Callable[[str, torch.device], list[Timed]], device: torch.device) -> list[Timed | Row]:
    """The set's calls on ``device``; a call that cannot be built or run (an older ascend_kv) is a Row saying why."""
    try:
        calls: list[Timed | Row] = list(make(name, device))
    except Exception as error:  # noqa: BLE001  (a name this ascend_kv does not have: the row says so)
        return [Row(name, "(the set)", device.type, unavailable=f"{type(error).__name__}: {error}")]
    for i, timed in enumerate(calls):
        assert isinstance(timed, Timed)
        before = _runs()
        try:
            timed.run()
        except Exception as error:  # noqa: BLE001  (reported as the row, the other calls still run)
            calls[i] = Row(name, timed.call, timed.device, unavailable=f"{type(error).__name__}: {error}")
            continue
        timed.ran = _where(before, _runs())
    return calls


def _runs() -> list[int] | None:
    """The operators' counts of where calls ran, or None for a tree without them."""
    try:
        return list(torch.ops.ascend_kv._runs())
    except (AttributeError, RuntimeError):
        return None


def _where(before: list[int] | None, after: list[int] | None) -> str | None:
    """The places whose counts grew (joined by ' + '), or None when nothing was counted."""
    if before is None or after is None:
        return None
    return " + ".join(place for place, a, b in zip(RAN_PLACES, before, after) if b > a) or None


# ----------------------------------------------------------------------------- the fake NPU


@dataclass
class FakeNpu:
    """The fake NPU while its rows run: its module, and the do-nothing kernels' launch count."""

    module: Any
    launches: Callable[[], int]

    def counts(self) -> tuple[int, int, int]:
        return self.module.transfers(), self.module.uploads(), int(self.launches())


def _load_fake_npu(source: Path | None = None) -> Any:
    """The fake NPU, installed: ``source`` (its ``__init__.py``; default ``tests/fake_npu`` of the
    checkout this ascend_kv was imported from), unless the tests imported it already; raises when absent."""
    module: Any
    if "fake_npu" in sys.modules:
        module = sys.modules["fake_npu"]
    else:
        source = source or Path(ascend_kv.__file__).resolve().parents[1] / FAKE_NPU
        if not source.is_file():
            raise FileNotFoundError(f"{source} does not exist: the fake NPU is in a source checkout only")
        spec = importlib.util.spec_from_file_location("fake_npu", source)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["fake_npu"] = module          # the tests import it under this name too
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules["fake_npu"]
            raise
    if hasattr(module, "_register_storage_format") and not _has_operator("_use_storage_format"):
        # An older ascend_kv has no storage-format hook: it reads formats through torch.npu.get_npu_format,
        # which the fake NPU's device module provides.
        module._register_storage_format = lambda extension: None
    module.install()
    return module


def _has_operator(name: str) -> bool:
    try:
        getattr(torch.ops.ascend_kv, name)
    except (AttributeError, RuntimeError):
        return False
    return True


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


#: The do-nothing kernels: a kernel table (ascendc/host/kernel_library.h, version 3) whose entries
#: count their calls, and, for an older tree whose kernel library registered torch.ops operators, an
#: operator namespace that replaces those operators' NPU kernels with one that counts its calls.
DO_NOTHING_NAMESPACE = "ascend_kv_overhead_kernels"
DO_NOTHING_SOURCE = r"""
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

namespace {

std::atomic<int64_t> launches{0};
std::vector<std::unique_ptr<torch::Library>> silenced;

// Tensors arrive by reference: pointers, never read.
using T = const void*;
void KvCache(T, T, T, T, T, int64_t) { ++launches; }
void PagedCacheLoad(T, T, T, T, T, T, T, int64_t, bool) { ++launches; }
void ReshapeAndCache(T, T, T, T, T, int64_t) { ++launches; }
void BlockCopy(T, T, T, T, bool) { ++launches; }
void TransferBlocks(T, T, T, c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef, bool) { ++launches; }
void MemcpyBatch(T, T, T, int64_t) { ++launches; }
void ReshapeAndCacheQuant(T, T, T, T, T, int64_t, T, T) { ++launches; }
void PagedCacheLoadDequant(T, T, T, T, T, T, T, int64_t, bool, T, T) { ++launches; }
void TransferSlots(T, T, T, T, bool) { ++launches; }
void BatchMemcpy(T, T, T) { ++launches; }

void BoxedNothing(const c10::OperatorHandle& op, torch::jit::Stack* stack)
{
    ++launches;
    TORCH_CHECK(op.schema().returns().empty(), "do-nothing kernels return nothing: ", op.schema().name());
    torch::jit::drop(*stack, op.schema().arguments().size());
}

}  // namespace

struct AscendKvOverheadKernelTable {
    uint32_t version;
    void (*kv_cache)(T, T, T, T, T, int64_t);
    void (*paged_cache_load)(T, T, T, T, T, T, T, int64_t, bool);
    void (*reshape_and_cache)(T, T, T, T, T, int64_t);
    void (*block_copy)(T, T, T, T, bool);
    void (*transfer_blocks)(T, T, T, c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef, bool);
    int64_t (*storage_format)(T);
    void (*memcpy_batch)(T, T, T, int64_t);
    void (*reshape_and_cache_quant)(T, T, T, T, T, int64_t, T, T);
    void (*paged_cache_load_dequant)(T, T, T, T, T, T, T, int64_t, bool, T, T);
    void (*transfer_slots)(T, T, T, T, bool);
    void (*batch_memcpy)(T, T, T);
};

static const AscendKvOverheadKernelTable kTable = {3, &KvCache, &PagedCacheLoad, &ReshapeAndCache, &BlockCopy,
                                                   &TransferBlocks, nullptr, &MemcpyBatch,
                                                   &ReshapeAndCacheQuant, &PagedCacheLoadDequant, &TransferSlots,
                                                   &BatchMemcpy};

extern "C" const AscendKvOverheadKernelTable* ascend_kv_kernel_library() { return &kTable; }

TORCH_LIBRARY(ascend_kv_overhead_kernels, m)
{
    m.def("launches() -> int", []() -> int64_t { return launches.load(); });
    m.def("silence(str ns, str[] ops) -> ()", [](std::string ns, std::vector<std::string> ops) {
        auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, c10::DispatchKey::PrivateUse1,
                                                    __FILE__, __LINE__);
        for (const std::string& op : ops) {
            lib->impl(op.c_str(), torch::CppFunction::makeFromBoxedFunction<&BoxedNothing>());
        }
        silenced.push_back(std::move(lib));
    });
    m.def("restore() -> ()", []() { silenced.clear(); });
}
"""
_do_nothing: Path | None = None


def _cache_root() -> Path:
    configured = os.environ.get("ASCEND_KV_CACHE_DIR", "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "ascend_kv"


def do_nothing_kernels() -> Path:
    """The do-nothing kernels' library (:data:`DO_NOTHING_SOURCE`), built once per source and torch
    (cached like the fake NPU) and loaded into this process."""
    global _do_nothing
    if _do_nothing is None:
        from torch.utils import cpp_extension

        if not any((Path(folder) / "ninja").is_file() for folder in os.environ.get("PATH", "").split(os.pathsep)):
            with contextlib.suppress(ImportError):     # the pip package's ninja, in a venv that is not active
                import ninja  # type: ignore[import-not-found]
                os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
        digest = hashlib.sha256((DO_NOTHING_SOURCE + torch.__version__).encode()).hexdigest()[:16]
        folder = _cache_root() / "overhead" / digest
        folder.mkdir(parents=True, exist_ok=True)
        source = folder / "do_nothing_kernels.cpp"
        if not source.is_file() or source.read_text() != DO_NOTHING_SOURCE:
            source.write_text(DO_NOTHING_SOURCE)
        path = cpp_extension.load(name=DO_NOTHING_NAMESPACE, sources=[str(source)], build_directory=str(folder),
                                  extra_cflags=["-O2"], is_python_module=False, verbose=False)
        _do_nothing = Path(str(path))
    return _do_nothing


@contextlib.contextmanager
def fake_npu(source: Path | None = None) -> Iterator[FakeNpu]:
    """The fake NPU, its calls taking the kernels' route to do-nothing kernels (see the module doc).

    Raises (before yielding) when the fake NPU or the do-nothing kernels are not available, or the
    kernel library does not load. The environment and the kernel library's state are restored
    afterwards: the next call loads the kernel library ``$ASCEND_KV_NPU_LIB`` names again.
    """
    module = _load_fake_npu(source)
    from ascend_kv.backends import npu  # where the operators find their kernel library

    library = do_nothing_kernels()
    kernels = getattr(torch.ops, DO_NOTHING_NAMESPACE)
    table = hasattr(npu, "TABLE_SYMBOL")        # this design: the operators call the library's table of entries
    if table:
        kernel_library = library
    else:                                       # older: the host build's torch.ops operators, silenced below
        from ascend_kv.backends import sim

        kernel_library = sim.library_path()
    with _environment(**{npu.LIBRARY_ENV: str(kernel_library), "ASCEND_KV_SOC": NPU_SOC}):
        npu.library.cache_clear()
        try:
            status = npu.library()
            if not status.loaded:
                raise RuntimeError(f"the kernel library {kernel_library} did not load: {status.reason}")
            if table:
                yield FakeNpu(module, kernels.launches)
                return
            older_status: Any = status                  # the older tree's names, which this tree's lack
            older_npu: Any = npu
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")             # "overriding a previously registered kernel": meant
                kernels.silence(older_status.namespace, list(older_npu.OPS))
            try:
                yield FakeNpu(module, kernels.launches)
            finally:
                kernels.restore()                           # the host build's own kernels again
        finally:
            npu.library.cache_clear()


# ----------------------------------------------------------------------------- measuring


def measure_set(name: str, make: Callable[[str, torch.device], list[Timed]], npu: FakeNpu | None,
                rounds: int, calls: int, swept_rounds: int, sweep: Callable[[], object] | None) -> list[Row]:
    """The rows of one set: its calls on the CPU and (with ``npu``) on the fake NPU, timed in the same rounds."""
    built = _build(name, make, torch.device("cpu"))
    if npu is not None:
        built += [c for c in _build(name, make, torch.device("npu", 0)) if c.device == "npu"]
    timed = [c for c in built if isinstance(c, Timed)]
    runs = [c.run for c in timed]
    counts = npu.counts if npu is not None else _no_counts
    time_rounds(runs, 2, calls)                                                   # warm up
    warm, warm_counts = time_rounds(runs, rounds, calls, counts=counts)
    swept: list[list[float]] | None = None
    swept_counts = [[0, 0, 0] for _ in runs]
    if sweep is not None:
        swept, swept_counts = time_rounds(runs, swept_rounds, 1, sweep, counts)
    rows: list[Row] = []
    timed_calls = rounds * calls + (swept_rounds if sweep is not None else 0)
    for c in built:
        if isinstance(c, Row):
            rows.append(c)
            continue
        k = timed.index(c)
        transfers, uploads, launches = (a + b for a, b in zip(warm_counts[k], swept_counts[k]))
        row = Row(name, c.call, c.device, warm_us=min(warm[k]) * 1e6, warm_median_us=statistics.median(warm[k]) * 1e6,
                  ran=c.ran, transfers=transfers, uploads=uploads,
                  launches_per_call=launches / timed_calls if c.device == "npu" else None,
                  samples={"warm_s": warm[k]})
        if swept is not None:
            row.swept_us, row.swept_median_us = min(swept[k]) * 1e6, statistics.median(swept[k]) * 1e6
            row.samples["swept_s"] = swept[k]
        if c.target is not None:
            row.target, row.goal = TARGETS[c.target]
        rows.append(row)
    _ratios(rows)
    return rows


def _ratios(rows: list[Row]) -> None:
    """Fill in each row's multiples of the set's CPU bare ``index_copy_`` and (NPU rows) of its CPU figure."""
    by_key = {(r.call, r.device): r for r in rows if r.unavailable is None}
    bare = by_key.get((BARE, "cpu"))
    for r in rows:
        if r.unavailable is not None:
            continue
        if bare is not None:
            r.x_index_copy = r.warm_us / bare.warm_us
            if r.swept_us is not None and bare.swept_us is not None:
                r.swept_x_index_copy = r.swept_us / bare.swept_us
        cpu = by_key.get((r.call, "cpu"))
        if r.device != "cpu" and cpu is not None:
            r.x_cpu = r.warm_us / cpu.warm_us
            if r.swept_us is not None and cpu.swept_us is not None:
                r.swept_x_cpu = r.swept_us / cpu.swept_us


# ----------------------------------------------------------------------------- output


_HEAD = (f"{'call':48} {'device':6} {'ran':10} {'warm us':>8} {'x bare':>7} {'swept us':>9} {'x bare':>7} "
         f"{'x cpu':>11} {'target (goal)':>15}")
#: The table's header lines, printed before the first set is measured.
TABLE_HEAD = [_HEAD, "-" * len(_HEAD)]
TABLE_NOTE = ("ran: where the operators counted the call (host paths, kernels, ...; - not counted); warm: fastest "
              "of the rounds, back-to-back calls; swept: one call after the sweep; x bare: multiple of the set's "
              "bare index_copy_ on the CPU; x cpu: the fake NPU's time over the CPU's, warm/swept "
              f"(goal <= {NPU_GOAL:g}); npu rows: the kernels' route, the kernel library's launches doing nothing")


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def format_row(r: Row) -> str:
    """One row as a line of the table under :data:`TABLE_HEAD`."""
    if r.unavailable is not None:
        return f"  {r.call:46} {r.device:6} {'-':10} unavailable: {r.unavailable}"
    x_cpu = "-" if r.x_cpu is None else f"{r.x_cpu:.2f}/{_number(r.swept_x_cpu)}"
    target = "-" if r.target is None else f"<= {r.target:g} ({r.goal:g})"
    line = (f"  {r.call:46} {r.device:6} {r.ran or '-':10} {r.warm_us:8.1f} {_number(r.x_index_copy):>7} "
            f"{_number(r.swept_us, 1):>9} {_number(r.swept_x_index_copy):>7} {x_cpu:>11} {target:>15}")
    if r.device == "npu" and r.call not in (BARE, NOOP) and r.launches_per_call != 1:
        line += f"  (kernel launches per call: {r.launches_per_call:g})"
    if r.transfers:
        line += f"  ({r.transfers} device-to-host transfers)"
    return line


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            model = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": model, "logical_cpus": os.cpu_count(), "platform": platform.platform(),
        "python": platform.python_version(), "torch": torch.__version__,
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


def fastest_of(paths: Sequence[str]) -> list[Row]:
    """The rows of several runs' JSON merged: per call the fastest warm and swept times of all runs,
    the multiples recomputed from those."""
    best: dict[tuple[str, str, str], Row] = {}
    for path in paths:
        with open(path, encoding="utf-8") as file:
            for data in json.load(file)["rows"]:
                row = Row(**data)
                kept = best.setdefault((row.set, row.call, row.device), row)
                if kept is row or row.unavailable is not None:
                    continue
                if kept.unavailable is not None:
                    best[row.set, row.call, row.device] = row
                    continue
                kept.warm_us = min(kept.warm_us, row.warm_us)
                if row.swept_us is not None:
                    kept.swept_us = row.swept_us if kept.swept_us is None else min(kept.swept_us, row.swept_us)
    rows = list(best.values())
    for name in dict.fromkeys(r.set for r in rows):
        _ratios([r for r in rows if r.set == name])
    return rows


def compare(old_paths: Sequence[str], new_paths: Sequence[str], names: tuple[str, str] = ("old", "new")) -> list[str]:
    """Two trees' runs side by side (:func:`fastest_of` each tree's runs), and new / old."""
    old, new = ({(r.set, r.call, r.device): r for r in fastest_of(paths)} for paths in (old_paths, new_paths))
    columns = [f"{names[0]} us", f"{names[1]} us", "new/old", f"x bare {names[0]}", f"x bare {names[1]}",
               f"swept {names[0]}", f"swept {names[1]}", "swept new/old"]
    widths = [max(7, len(column)) for column in columns]
    head = f"{'call':48} {'device':6} " + " ".join(f"{column:>{width}}" for column, width in zip(columns, widths))
    title = (f"fastest of {len(old_paths)} run(s) of {names[0]} and {len(new_paths)} of {names[1]}; us per call, "
             "warm and swept (one call after the sweep); x bare: warm, multiple of the set's bare index_copy_ on the CPU")
    lines = [title, head, "-" * len(head)]
    current = None
    for key in [*new, *(k for k in old if k not in new)]:
        if key[0] != current:
            current = key[0]
            lines.append(current)
        a, b = old.get(key), new.get(key)
        if a is None or b is None or a.unavailable is not None or b.unavailable is not None:
            why = "; ".join(f"{name}: {'not measured' if row is None else row.unavailable}"
                            for name, row in zip(names, (a, b)) if row is None or row.unavailable is not None)
            lines.append(f"  {key[1]:46} {key[2]:6} {why}")
            continue
        swept_ratio = None if a.swept_us is None or b.swept_us is None else b.swept_us / a.swept_us
        values = [_number(a.warm_us, 1), _number(b.warm_us, 1), _number(b.warm_us / a.warm_us),
                  _number(a.x_index_copy), _number(b.x_index_copy), _number(a.swept_us, 1), _number(b.swept_us, 1),
                  _number(swept_ratio)]
        lines.append(f"  {key[1]:46} {key[2]:6} " + " ".join(f"{value:>{width}}" for value, width in zip(values, widths)))
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ascend-kv bench --overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="interleaved warm rounds; the fastest counts (default 40)")
    parser.add_argument("--calls", type=int, default=100, help="back-to-back calls per warm timing (default 100)")
    parser.add_argument("--swept-rounds", type=int, default=40,
                        help="interleaved rounds of one call after a sweep; the fastest counts (default 40)")
    parser.add_argument("--sweep-mb", type=int, default=64,
                        help="MB written before each swept call, more than the last-level cache; 0 skips the swept "
                             "rounds (default 64)")
    parser.add_argument("--no-npu", action="store_true", help="the CPU only, even where the fake NPU exists")
    parser.add_argument("--fake-npu", type=Path, metavar="FILE",
                        help=f"the fake NPU's __init__.py (default: {FAKE_NPU} of the checkout ascend_kv is imported "
                             "from; two trees measured with one build of it compare the same device)")
    parser.add_argument("--tiny", action="store_true",
                        help="2 rounds of 2 calls, 2 swept rounds after 1 MB (a smoke test, not a measurement)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"),
                        help="instead of measuring: print two runs' JSON side by side (comma-separated paths: the "
                             "fastest of each tree's runs)")
    parser.add_argument("--names", default="old,new", help="with --compare: the two trees' names (default old,new)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Measure with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.compare:
        old, new = (paths.split(",") for paths in args.compare)
        names = args.names.split(",", 1)
        print(*compare(old, new, (names[0], names[-1])), sep="\n")
        return 0
    if args.tiny:
        args.rounds, args.calls, args.swept_rounds, args.sweep_mb = 2, 2, 2, min(args.sweep_mb, 1)
    if min(args.rounds, args.calls, args.swept_rounds) < 1 or args.sweep_mb < 0:
        print("ascend-kv bench --overhead: --rounds, --calls and --swept-rounds must be >= 1, --sweep-mb >= 0",
              file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    sweep = sweeper(args.sweep_mb) if args.sweep_mb else None
    print(f"ascend-kv bench --overhead: ascend_kv from {Path(ascend_kv.__file__).parent}, thread CPU time, "
          f"1 thread, fastest of {args.rounds} rounds of {args.calls} calls warm"
          + (f", of {args.swept_rounds} rounds of one call after a {args.sweep_mb} MB sweep" if sweep else "")
          + (" (tiny: not a measurement)" if args.tiny else ""), flush=True)
    before = machine()
    with contextlib.ExitStack() as stack:
        npu, reason = None, "--no-npu"
        if not args.no_npu:
            try:
                npu = stack.enter_context(fake_npu(args.fake_npu))
            except Exception as error:  # noqa: BLE001  (no checkout, compiler or host build: CPU only)
                reason = f"{type(error).__name__}: {error}"
        print("fake NPU: index tensors on the device, the kernels' route, kernel launches doing nothing"
              if npu is not None
              else f"fake NPU: not measured ({reason}); the CPU only", flush=True)
        print(*TABLE_HEAD, sep="\n", flush=True)
        rows: list[Row] = []
        for name, make in SETS:
            print(f"ascend-kv bench --overhead: measuring {name} ...", file=sys.stderr, flush=True)
            measured = measure_set(name, make, npu, args.rounds, args.calls, args.swept_rounds, sweep)
            print(name, *map(format_row, measured), sep="\n", flush=True)
            rows.extend(measured)
    print(TABLE_NOTE)
    result = {
        "machine": before, "load_average_after": machine()["load_average"],
        "ascend_kv": {"version": getattr(ascend_kv, "__version__", None), "path": str(Path(ascend_kv.__file__).parent)},
        "settings": {"rounds": args.rounds, "calls": args.calls, "swept_rounds": args.swept_rounds,
                     "sweep_mb": args.sweep_mb, "threads": torch.get_num_threads(), "tiny": args.tiny,
                     "clock": "time.thread_time", "statistic": "min"},
        "fake_npu": {"measured": npu is not None, "reason": None if npu is not None else reason},
        "rows": [asdict(r) for r in rows],
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
