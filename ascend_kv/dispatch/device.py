"""What runtime is here: torch_npu, an NPU, and the SoC behind a device. Never breaks the host.

Every probe is lazy (nothing runs until the dispatcher or ``ascend-kv info`` asks), done once
and cached, and catches everything: torch_npu may be absent, present without the CANN runtime
(its import then raises ``ImportError`` naming ``libhccl.so`` or ``libascendcl.so``, or a plain
``Exception`` when ``ASCEND_HOME_PATH`` points nowhere), or present with an NPU. A failure's
message is kept verbatim: it is what users need to see.

``ASCEND_KV_SOC`` (e.g. ``Ascend910B3``) overrides the SoC name of every NPU device, for
queries and tests; it is read on every call.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
from dataclasses import dataclass
from types import ModuleType

import torch

from . import autoload

SOC_ENV = "ASCEND_KV_SOC"
AUTOLOAD_ADVICE = (
    "torch_npu is installed but cannot load (the CANN runtime is missing or not set up), so a plain "
    "`import torch` fails in this environment unless TORCH_DEVICE_BACKEND_AUTOLOAD=0 is set first; "
    "ascend_kv works around it and runs on the fallback. To use the NPU, install CANN and "
    "`source <CANN install dir>/set_env.sh` (e.g. /usr/local/Ascend/ascend-toolkit/set_env.sh); "
    "on a host without an NPU, uninstall torch_npu or export TORCH_DEVICE_BACKEND_AUTOLOAD=0."
)
NPU_DEVICE_TYPE = "npu"  # the name torch_npu gives PyTorch's PrivateUse1 device


@dataclass(frozen=True)
class TorchNpu:
    """The outcome of importing torch_npu.

    Attributes
    ----------
    module : ModuleType or None
        ``torch_npu``, or None when it could not be imported.
    version : str or None
        The installed torch_npu distribution's version (known even when the import fails), or
        None when it is not installed.
    reason : str or None
        Why the import failed, ``"ExceptionType: message"`` verbatim; None when it worked.
    """

    module: ModuleType | None
    version: str | None
    reason: str | None


@functools.cache
def torch_npu() -> TorchNpu:
    """Import torch_npu once, catching every failure (it needs the CANN runtime)."""
    try:
        version: str | None = importlib.metadata.version("torch_npu")
    except importlib.metadata.PackageNotFoundError:
        version = None
    if "torch_npu" in autoload.failures:  # the autoload already tried and failed: same cause
        return TorchNpu(None, version, autoload.failures["torch_npu"])
    try:
        module = importlib.import_module("torch_npu")
    except Exception as error:  # ImportError without CANN; plain Exception for bad CANN paths
        return TorchNpu(None, version, f"{type(error).__name__}: {error}")
    if getattr(module, "STAND_IN", False):  # ascend_kv.testing put the facade there: no NPU behind it
        return TorchNpu(None, version, "torch_npu is ascend_kv's stand-in (ascend_kv.testing.torch_npu_stand_in)")
    return TorchNpu(module, getattr(module, "__version__", version), None)


@dataclass(frozen=True)
class NpuRuntime:
    """Whether NPUs can be used here.

    Attributes
    ----------
    available : bool
        torch_npu imported and ``torch.npu.is_available()``.
    device_count : int
        NPUs visible (0 when not available).
    reason : str or None
        Why not available, verbatim where it comes from an exception; None when available.
    """

    available: bool
    device_count: int
    reason: str | None


@functools.cache
def npu_runtime() -> NpuRuntime:
    """Probe the NPU runtime once (initialises it: call only when an answer is needed)."""
    imported = torch_npu()
    if imported.module is None:
        if imported.version is None:
            return NpuRuntime(False, 0, "torch_npu is not installed")
        return NpuRuntime(False, 0, f"torch_npu cannot be imported: {imported.reason}")
    try:
        if not imported.module.npu.is_available():
            return NpuRuntime(False, 0, "torch_npu is loaded but torch_npu.npu.is_available() is False: no NPU visible")
        return NpuRuntime(True, int(imported.module.npu.device_count()), None)
    except Exception as error:
        return NpuRuntime(False, 0, f"{type(error).__name__}: {error}")


def is_npu(device: torch.device) -> bool:
    """Whether ``device`` is an Ascend NPU (torch_npu's ``"npu"`` device type)."""
    return device.type == NPU_DEVICE_TYPE


def _npu_module() -> ModuleType:
    """``torch_npu.npu``, or without torch_npu the ``torch.npu`` device module a test's fake NPU registers."""
    module = torch_npu().module
    return module.npu if module is not None else getattr(torch, NPU_DEVICE_TYPE)  # type: ignore[no-any-return]


@functools.cache
def _device_name(index: int) -> str:
    return str(_npu_module().get_device_name(index))


def soc_override() -> str | None:
    """The ``ASCEND_KV_SOC`` override, or None when unset or blank."""
    value = os.environ.get(SOC_ENV, "").strip()
    return value or None


def soc_of(device: torch.device) -> str | None:
    """The SoC name of NPU ``device`` (``ASCEND_KV_SOC`` first); None for other devices.

    Parameters
    ----------
    device : torch.device
        The device the call's tensors are on.

    Returns
    -------
    str or None
        E.g. ``"Ascend910B3"``, as the runtime reports it (``aclrtGetSocName()``).
    """
    if not is_npu(device):
        return None
    override = soc_override()
    if override is not None:
        return override
    index = device.index if device.index is not None else int(_npu_module().current_device())
    return _device_name(index)


def host_soc() -> tuple[str | None, str]:
    """The SoC of this host for reports: ``(name or None, where it came from or why not)``.

    ``ASCEND_KV_SOC`` first; else NPU 0's name when an NPU is available.
    """
    override = soc_override()
    if override is not None:
        return override, f"from {SOC_ENV}"
    runtime = npu_runtime()
    if not runtime.available:
        return None, runtime.reason or "no NPU"
    try:
        return _device_name(0), "from NPU 0"
    except Exception as error:
        return None, f"{type(error).__name__}: {error}"


def advice() -> str | None:
    """What to do when torch_npu is installed but cannot load (CANN missing), else None."""
    imported = torch_npu()
    return AUTOLOAD_ADVICE if imported.version is not None and imported.module is None else None


#: ACL storage formats in which an NPU tensor's bytes are in its logical row-major layout.
BASE_FORMATS = {0: "NCHW", 1: "NHWC", 2: "ND", 30: "NCDHW"}
#: Names of the private formats users meet most (others are reported by number).
PRIVATE_FORMATS = {3: "NC1HWC0", 4: "FRACTAL_Z", 29: "FRACTAL_NZ", 32: "NDC1HWC0", 33: "FRACTAL_Z_3D"}
#: ACL's FRACTAL_NZ format (after ``npu_format_cast(t, 29)``): NZ caches may be stored in it.
FRACTAL_NZ = 29


@functools.cache
def _format_getter() -> object | None:
    """``torch_npu.get_npu_format``, or the NPU device module's function of that name, or None."""
    module = torch_npu().module
    getter = getattr(module, "get_npu_format", None) if module is not None else None
    return getter or getattr(getattr(torch, NPU_DEVICE_TYPE, None), "get_npu_format", None)


def storage_format(tensor: torch.Tensor) -> int | None:
    """The ACL storage format of an NPU tensor (e.g. 2 = ND, 29 = FRACTAL_NZ); None off the NPU or
    when nothing here can tell."""
    getter = _format_getter() if is_npu(tensor.device) else None
    return None if getter is None else int(getter(tensor))  # type: ignore[operator]
