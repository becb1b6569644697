"""A fake NPU for tests: PyTorch's PrivateUse1 device, renamed ``npu``, holding host memory.

Device tensors are real host memory (``data_ptr()``, views, strides and in-place ops behave as
on a device; allocations are 512-byte aligned, op results borrowed from a CPU kernel have the
CPU allocator's 64); every op without a kernel of its own runs its CPU kernel over that same
memory. What a real NPU would make the host wait for is counted, so a test can prove a call never
does:

- ``transfers()``: device-to-host copies (``.cpu()``, ``.to("cpu")``, ``copy_`` into a host
  tensor, ``tolist()``, ``numpy(force=True)``, printing), scalar reads (``item()``, ``bool()``,
  ``int()``, ``float()``), ops whose output shape depends on the values (``nonzero`` and what
  uses it: ``argwhere``, ``where(cond)``, boolean-mask indexing; ``masked_select``, the
  ``unique`` family, ``bincount``, ``repeat_interleave`` with tensor repeats and no
  ``output_size``, ``histc`` with ``min == max``), ``equal``, and explicit synchronisation
  (``torch.npu.synchronize()``, ``torch.accelerator.synchronize()``, stream and event waits):
  each is a point where the host would wait for the device, which a call that must be captured in
  a graph or overlap with the device cannot have.
- ``uploads()``: host-to-device copies; ``blocking_uploads()`` those a real NPU would wait for
  (not ``non_blocking=True`` from pinned memory), host index tensors moved by advanced indexing
  included.

For tests that look closer: ``same_layout()`` puts host tensors on the device with their exact
memory layout (the bytes between a view's elements included) and copies the device memory back
afterwards; ``recording()`` keeps host copies of the arguments of chosen ops as the device runs
them (e.g. ``aten::_index_put_impl_``, or ``aten::_copy_from`` with its ``non_blocking`` flag);
``memory_capacity()`` limits the device memory, so an allocation beyond it fails as on a device;
``largest_allocations()`` measures the largest single allocation of host and of device memory a
block makes (a call's temporaries).

``install()`` builds the C++ extension once (cached under ``$ASCEND_KV_CACHE_DIR`` or
``~/.cache/ascend_kv``, keyed by a hash of the sources and the torch version) and installs it for
the whole process. CPU tensors and ops behave as before; what changes is that torch now has an
accelerator: ``torch.accelerator`` reports ``npu``, so ``pin_memory()`` pins through the fake NPU
and torch's accelerator helpers call ``torch.npu``. The SoC name reported is
``$ASCEND_KV_SOC`` (default ``Ascend910B3``); the number of devices ``$ASCEND_KV_FAKE_NPU_DEVICES``
(default 2).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

#: ACL's aclFormat values: ND is the base format (bytes in logical order); FRACTAL_NZ is not.
FORMAT_ND = 2
FORMAT_FRACTAL_NZ = 29

DEFAULT_SOC = "Ascend910B3"
DEFAULT_DEVICE_COUNT = 2
DEVICE_COUNT_ENV = "ASCEND_KV_FAKE_NPU_DEVICES"

_SOURCES = ("fake_npu.h", "device.cpp", "kernels.cpp", "bindings.cpp")
_extension: Any | None = None


def _cache_root() -> Path:
    configured = os.environ.get("ASCEND_KV_CACHE_DIR", "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "ascend_kv"


def _put_ninja_on_path() -> None:
    """torch runs ``ninja`` from PATH; the pip package's binary may sit in a venv that is not active."""
    if shutil.which("ninja") is not None:
        return
    try:
        import ninja  # type: ignore[import-not-found]
    except ImportError:
        return  # torch's own error then says ninja is required
    os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


def _build() -> Any:
    """Compile (or reuse) the extension: one build folder per source hash and torch version."""
    from torch.utils import cpp_extension

    _put_ninja_on_path()
    here = Path(__file__).parent
    digest = hashlib.sha256(torch.__version__.encode())
    for name in _SOURCES:
        digest.update((here / name).read_bytes())
    build_dir = _cache_root() / "fake_npu" / digest.hexdigest()[:16]
    build_dir.mkdir(parents=True, exist_ok=True)
    return cpp_extension.load(
        name="ascend_kv_fake_npu",
        sources=[str(here / name) for name in _SOURCES if name.endswith(".cpp")],
        build_directory=str(build_dir),
        extra_cflags=["-O1"],
        verbose=False,
    )


def _device_module(extension: Any) -> types.ModuleType:
    """``torch.npu``: the parts of torch_npu's device module the package and torch use."""
    module = types.ModuleType("torch.npu")

    def synchronize(device: Any = None) -> None:
        """Wait for the device: counted as a transfer (the host blocks on the device)."""
        extension.synchronize()

    def get_device_name(device: Any = None) -> str:
        return os.environ.get("ASCEND_KV_SOC", DEFAULT_SOC)

    def set_device(device: Any) -> None:
        index = device if isinstance(device, int) else torch.device(device).index
        extension.set_device(extension.current_device() if index is None else index)

    # Random ops run their CPU kernels and draw from the CPU generator: the device's random state
    # is the CPU's (torch's own helpers, e.g. opcheck's freeze_rng_state, save and restore it).
    module.get_rng_state = lambda device="npu": torch.get_rng_state()
    module.set_rng_state = lambda state, device="npu": torch.set_rng_state(state)
    module.manual_seed = module.manual_seed_all = lambda seed: torch.random.default_generator.manual_seed(seed)
    module.seed = module.seed_all = lambda: torch.random.default_generator.seed()
    module.initial_seed = lambda: torch.random.default_generator.initial_seed()
    module.is_available = lambda: True
    module.is_initialized = lambda: True
    # Called by torch's lazy device init (the first device tensor): torch then counts the device as
    # initialized, which torch.accelerator.synchronize() asks before it synchronizes (2.10).
    module._lazy_init = lambda: None
    module.device_count = extension.device_count
    module.current_device = extension.current_device
    module.set_device = set_device
    module.synchronize = synchronize
    module.current_stream = lambda device=None: torch.accelerator.current_stream(device)
    module.get_device_name = get_device_name
    module.get_npu_format = storage_format
    module._is_in_bad_fork = lambda: False
    module.fake_npu_extension = extension  # found again if this file is imported under another name
    return module


def install() -> None:
    """Build the extension once and make ``npu`` a device of this process (idempotent, permanent)."""
    global _extension
    if _extension is not None:
        return
    installed = getattr(getattr(torch, "npu", None), "fake_npu_extension", None)
    if installed is not None:
        _extension = installed
        return
    backend = torch._C._get_privateuse1_backend_name()
    if backend not in ("privateuseone", "npu"):
        raise RuntimeError(f"fake NPU: PrivateUse1 is already taken by the backend {backend!r}")
    if hasattr(torch, "npu"):
        raise RuntimeError("fake NPU: torch.npu already exists (is torch_npu loaded?); a fake NPU cannot join it")
    extension = _build()
    extension.set_device_count(int(os.environ.get(DEVICE_COUNT_ENV, DEFAULT_DEVICE_COUNT)))
    if backend == "privateuseone":
        torch.utils.rename_privateuse1_backend("npu")
    torch._register_device_module("npu", _device_module(extension))
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    _register_storage_format(extension)
    _extension = extension


def _register_storage_format(extension: Any) -> None:
    """Tell ascend_kv's operators how to read a fake NPU tensor's storage format (a C function of the
    extension), as they read torch_npu's on an NPU."""
    import ctypes

    import ascend_kv  # noqa: F401  (loads the operator library)

    function = ctypes.CDLL(extension.__file__).ascend_kv_fake_npu_storage_format
    torch.ops.ascend_kv._use_storage_format(ctypes.cast(function, ctypes.c_void_p).value)


def _installed() -> Any:
    if _extension is None:
        raise RuntimeError("fake NPU: call install() first")
    return _extension


def transfers() -> int:
    """Device-to-host transfers and host waits since the last ``reset()`` (see the module doc)."""
    return int(_installed().transfers())


def uploads() -> int:
    """Host-to-device copies since the last ``reset()``."""
    return int(_installed().uploads())


def blocking_uploads() -> int:
    """Host-to-device copies a real NPU would wait for (not non-blocking from pinned memory)."""
    return int(_installed().blocking_uploads())


def reset() -> None:
    """Set every counter to zero."""
    _installed().reset()


@dataclass
class Counts:
    """What happened inside a ``counting()`` block (final once the block ends)."""

    transfers: int = 0
    uploads: int = 0
    blocking_uploads: int = 0


@contextlib.contextmanager
def counting() -> Iterator[Counts]:
    """Count the transfers and uploads of the block: ``with counting() as seen: ...; seen.transfers``."""
    start = (transfers(), uploads(), blocking_uploads())
    counts = Counts()
    try:
        yield counts
    finally:
        counts.transfers = transfers() - start[0]
        counts.uploads = uploads() - start[1]
        counts.blocking_uploads = blocking_uploads() - start[2]


def storage_format(tensor: torch.Tensor) -> int:
    """The ACL storage format of a fake NPU tensor's memory (``FORMAT_ND`` unless set)."""
    return int(_installed().storage_format(tensor))


def set_storage_format(tensor: torch.Tensor, format: int) -> None:
    """Make the memory behind ``tensor`` (and every view of it) report ``format``, as after
    torch_npu's ``npu_format_cast``; the bytes are not rearranged."""
    _installed().set_storage_format(tensor, format)


@contextlib.contextmanager
def memory_capacity(nbytes: int) -> Iterator[None]:
    """Inside the block, an allocation that would take the device memory in use (:func:`memory_in_use`)
    past ``nbytes`` fails as a device out of memory does (``torch.OutOfMemoryError``)."""
    previous = int(_installed().memory_capacity())
    _installed().set_memory_capacity(nbytes)
    try:
        yield
    finally:
        _installed().set_memory_capacity(previous)


@dataclass
class Largest:
    """The largest single allocation inside a ``largest_allocations()`` block, in bytes (final once it ends)."""

    host: int = 0
    device: int = 0


@contextlib.contextmanager
def largest_allocations() -> Iterator[Largest]:
    """Measure the largest single allocation of host memory (torch's CPU allocator, wrapped for the
    block) and of device memory the block makes: ``with largest_allocations() as seen: ...; seen.host``."""
    seen = Largest()
    _installed().start_measuring()
    try:
        yield seen
    finally:
        seen.host, seen.device = _installed().stop_measuring()


def memory_in_use() -> int:
    """Bytes of device memory allocated and not yet freed (memory borrowed from host results excluded)."""
    return int(_installed().memory_in_use())


@dataclass
class RecordedCall:
    """One call of a recorded op: ``args`` its arguments as they were when it was called (tensors
    copied to host memory, lists as lists), ``devices`` where each argument's tensors were (``""``
    for a value holding none)."""

    name: str
    args: list[Any]
    devices: list[str]


@contextlib.contextmanager
def recording(*names: str) -> Iterator[list[RecordedCall]]:
    """Record the calls of the ops ``names`` (``"aten::_index_put_impl_"``, ``"aten::_copy_from"``, ...)
    the device runs inside the block: ``with recording(name) as calls: ...``; ``calls`` is complete once
    the block ends. Copying the arguments is not counted as a transfer."""
    calls: list[RecordedCall] = []
    _installed().start_recording(list(names))
    try:
        yield calls
    finally:
        calls.extend(RecordedCall(name, list(args), list(devices)) for name, args, devices in _installed().stop_recording())


@dataclass
class Mirror:
    """Host tensors on the device, laid out as on the host (see :func:`same_layout`)."""

    values: list[Any]
    _storages: list[tuple[torch.Tensor, torch.Tensor]]

    def copy_back(self) -> None:
        """Copy each device memory back into the host memory it came from, the bytes between elements included."""
        for host_bytes, device_bytes in self._storages:
            host_bytes.copy_(device_bytes)


def same_layout(values: Any, device: str | torch.device = "npu:0") -> Mirror:
    """``values`` with each host tensor on ``device`` over a copy of its whole storage, with its sizes,
    strides and storage offset: views of one host storage stay views of one device storage, and the
    bytes between a view's elements come along (``tensor.to()`` would make a strided view contiguous).
    Other values stay as they are."""
    _installed()
    storages: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
    moved: list[Any] = []
    for value in values:
        if not isinstance(value, torch.Tensor):
            moved.append(value)
            continue
        storage = value.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        if key not in storages:
            host_bytes = torch.empty(0, dtype=torch.uint8).set_(storage)
            storages[key] = (host_bytes, host_bytes.to(device))
        device_bytes = storages[key][1]
        moved.append(device_bytes.view(value.dtype).as_strided(value.shape, value.stride(), value.storage_offset()))
    return Mirror(moved, list(storages.values()))

