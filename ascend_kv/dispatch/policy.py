"""Which backend runs a call, and why (docs/hardware.md#dispatch).

Backends: ``npu`` (the AscendC kernels through their compiled kernel library), ``sim`` (the same
kernels built for the host; only ever chosen explicitly, CPU tensors only) and ``fallback`` (the
CPU paths on the host, ATen operations on any other device). The operators (C++) ask
:func:`choose` the first time a kind of call comes, through :mod:`.bridge`, and keep its answer;
:func:`explain` answers from the same :func:`decide` without running anything. :func:`forget`
makes them ask again.

The requested backend comes from :func:`use_backend` (a context manager), else the environment
variable ``ASCEND_KV_BACKEND`` (``auto``, ``npu``, ``sim`` or ``fallback``), read once, else
``auto``. ``auto`` runs the kernels when the tensors are on an NPU whose product line supports
the operation, the kernel library is loaded and the call is inside the kernels' domain; anything
else runs on the fallback, and a fallback on an NPU is reported once per reason with a
:class:`FallbackWarning`. An explicit backend that cannot run raises
:class:`BackendUnavailableError` saying why; it never falls back silently.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import sys
import types
import warnings
from dataclasses import dataclass

import torch

from ..api.errors import BackendUnavailableError, FallbackWarning
from ..backends import npu
from ..operators import library
from . import bridge, settings, support
from . import device as runtime

BACKEND_CHOICES = ("auto", "npu", "sim", "fallback")
BACKEND_ENV = "ASCEND_KV_BACKEND"
_OP_NAMES = {"kv_cache": "KVCacheOperation", "paged_cache_load": "PagedCacheLoadOperation",
             "reshape_and_cache": "ReshapeAndCacheOperation", "block_copy": "BlockCopyOperation",
             "copy_blocks": "BlockCopyOperation", "gather_blocks": "BlockCopyOperation",
             "scatter_blocks": "BlockCopyOperation",
             # Not ATB operations: their kernels (block_copy's, batch_memcpy's) run where block_copy's does,
             # so BlockCopyOperation's decision is theirs (docs/semantics.md §14.4).
             "copy_state_slots": "BlockCopyOperation", "gather_state_slots": "BlockCopyOperation",
             "scatter_state_slots": "BlockCopyOperation", "batch_memcpy": "BlockCopyOperation",
             # reshape_and_cache's kernel, key-only ND (docs/semantics.md §15.1).
             "scatter_nd_update": "ReshapeAndCacheOperation"}
#: Every public operation, by its function's name (``ascend-kv --help`` lists them); the ones
#: :func:`explain` knows are those above, the others move bytes with no backend choice.
FUNCTIONS = ("kv_cache", "paged_cache_load", "reshape_and_cache", "block_copy", "copy_blocks", "swap_blocks",
             "swap_blocks_batch", "gather_blocks", "scatter_blocks", "copy_state_slots", "gather_state_slots",
             "scatter_state_slots", "batch_memcpy", "scatter_nd_update", "gather_cache", "block_address_lists")

#: The reasons a FallbackWarning was given for (once each).
_warned: set[str] = set()


@dataclass(frozen=True)
class Decision:
    """What runs an operation, and why.

    Attributes
    ----------
    op : str
        The operation's ATB name (one of :data:`ascend_kv.dispatch.support.OPERATIONS`), e.g. ``"KVCacheOperation"``.
    requested : str
        The requested backend: ``"auto"``, ``"npu"``, ``"sim"`` or ``"fallback"``.
    backend : str or None
        The backend that runs (``"npu"``, ``"sim"`` or ``"fallback"``), or None when the
        requested backend cannot run (the call would raise :class:`BackendUnavailableError`).
    reason : str
        Why ``backend`` runs, or why the requested backend cannot.
    device : str
        The tensors' device.
    soc : str or None
        The SoC name of that device (None off the NPU).
    product_line : str or None
        The SoC's product line id (None off the NPU or for an unknown SoC).
    element_types : str
        The element types every backend takes, and where they go beyond Huawei's lists
        (set by :func:`explain`).
    quantization : str
        For the paged write and load: which quantizing calls the kernels run and where their
        bytes may differ from the CPU reference (set by :func:`explain`; see :func:`quantization_note`).
    """

    op: str
    requested: str
    backend: str | None
    reason: str
    device: str
    soc: str | None = None
    product_line: str | None = None
    element_types: str = ""
    quantization: str = ""

    def __str__(self) -> str:
        runs = f"runs on {self.backend}" if self.backend else f"cannot run on {self.requested}"
        return f"{self.op} on {self.device} ({self.requested}): {runs}: {self.reason}"

    def refusal(self) -> BackendUnavailableError:
        """The error a call raises when the requested backend cannot run it (``backend`` is None)."""
        return BackendUnavailableError(
            f"backend {self.requested!r} cannot run {self.op} on {self.device}: {self.reason}")


BACKEND = settings.Setting(BACKEND_ENV, BACKEND_CHOICES, "auto", "backend", "backend")
environment_backend = BACKEND.environment
"""``ASCEND_KV_BACKEND``, or ``"auto"`` when unset; read once (``environment_backend.cache_clear()`` reads it again)."""
requested_backend = BACKEND.current
"""The backend asked for: :func:`use_backend`, else ``ASCEND_KV_BACKEND``, else ``"auto"``."""


def use_backend(name: str) -> contextlib.AbstractContextManager[None]:
    """Run the calls inside the ``with`` block on backend ``name`` (or ``"auto"``).

    Examples
    --------
    >>> with ascend_kv.use_backend("fallback"):
    ...     ascend_kv.kv_cache(new_kv, 0, past, token_offset, seq_len)
    """
    return BACKEND.use(name)


def _sim_unavailable() -> str | None:
    """Why the host build of the kernels cannot run here (not importable, no sources, no compiler), or None."""
    try:
        sim = importlib.import_module("ascend_kv.backends.sim")
    except Exception as error:
        return f"the host build of the kernels is not available: {type(error).__name__}: {error}"
    why: str | None = sim.unavailable()
    return None if why is None else f"the host build of the kernels is not available: {why}"


def _without_kernels(
    op: str, device: str, requested: str, why: str, soc: str | None = None, line: str | None = None
) -> Decision:
    """``auto`` falls back; an explicit ``npu`` cannot run."""
    return Decision(op, requested, "fallback" if requested == "auto" else None, why, device, soc, line)


def _kernel_decision(op: str, dev: torch.device, requested: str, outside: str | None) -> Decision:
    """The decision for ``auto`` or ``npu`` (``outside``: why the kernels cannot take the inputs, or None)."""
    if not runtime.is_npu(dev):
        return _without_kernels(op, str(dev), requested, f"the tensors are on {dev}, not on an Ascend NPU")
    return _soc_decision(op, str(dev), runtime.soc_of(dev), requested, outside)


def _soc_decision(op: str, device: str, soc: str | None, requested: str, outside: str | None) -> Decision:
    """The decision for ``auto`` or ``npu`` on an NPU (``device``) whose SoC is ``soc``."""
    def without_kernels(why: str, soc: str | None = None, line: str | None = None) -> Decision:
        return _without_kernels(op, device, requested, why, soc, line)

    line = support.product_line(soc) if soc is not None else None
    if line is None:
        return without_kernels(f"SoC {soc!r} is not a known Ascend SoC (see `ascend-kv support-matrix`)", soc)
    if not line.kernels_run(op):
        built_for = f": ascend_kv's kernels are built for {' and '.join(support.KERNEL_LINES)} only" if line.supports(op) else ""
        return without_kernels(f"the kernels do not support {op} on {line.name} (SoC {soc}){built_for}", soc, line.id)
    status = npu.library()
    if not status.loaded:
        return without_kernels(f"the kernel library is not loaded: {status.reason}", soc, line.id)
    if outside is not None:
        return without_kernels(f"the call is outside the kernels' domain: {outside}", soc, line.id)
    why = f"{line.name} (SoC {soc}) supports {op}; kernel library {status.path}"
    return Decision(op, requested, "npu", why, device, soc, line.id)


def _decide(op: str, dev: torch.device, requested: str, outside: str | None) -> Decision:
    if requested == "fallback":
        return Decision(op, requested, "fallback", f"chosen explicitly ({BACKEND_ENV} or use_backend)", str(dev))
    if requested == "sim":
        # The host build is a test instrument: it runs strided tensors on contiguous copies, so
        # the kernels' domain (``outside``) does not limit it.
        why: str | None
        if dev.type != "cpu":
            why = f"the host build of the kernels runs on cpu tensors, the tensors are on {dev}"
        else:
            why = _sim_unavailable()
        if why is not None:
            return Decision(op, requested, None, why, str(dev))
        return Decision(op, requested, "sim", f"chosen explicitly ({BACKEND_ENV} or use_backend)", str(dev))
    return _kernel_decision(op, dev, requested, outside)


def decide(op: str, dev: torch.device, outside: str | None) -> Decision:
    """The decision for operation ``op`` (an ATB name) on tensors on ``dev`` under the requested
    backend; ``outside`` says why the kernels cannot take the call's tensors, or None."""
    return _decide(op, dev, requested_backend(), outside)


def choose(op: str, dev: torch.device, requested: str, outside: str | None) -> str:
    """The backend that runs a call (``"npu"``, ``"sim"`` or ``"fallback"``), its library loaded; a
    fallback on an NPU under ``auto`` warns once per reason.

    Raises
    ------
    BackendUnavailableError
        The requested backend cannot run this call; the message says why.
    """
    decision = _decide(op, dev, requested, outside)
    if decision.backend is None:
        raise decision.refusal()
    if decision.backend == "sim":
        importlib.import_module("ascend_kv.backends.sim").load()  # may compile on first use
    if decision.backend == "fallback" and decision.requested == "auto" and runtime.is_npu(dev):
        _warn_once(decision)
    return decision.backend


def forget() -> None:
    """Make the operators ask again: what they kept of the decisions, the environment and the
    warnings given (each reason warns once more)."""
    _warned.clear()
    bridge.forget()


def _warn_once(decision: Decision) -> None:
    if decision.reason in _warned:
        return
    _warned.add(decision.reason)
    warnings.warn(
        f"ascend_kv: {decision.op} on {decision.device} runs on the vectorized fallback, not the AscendC "
        f"kernels: {decision.reason} (said once per reason; `ascend-kv info` explains)",
        FallbackWarning,
        stacklevel=_callers_level(),
    )


def _callers_level() -> int:
    """The ``stacklevel`` of the first frame outside ascend_kv and torch: the caller's line, whatever
    route (public function, facade, operator) the call took to the policy."""
    inside = (os.path.dirname(os.path.dirname(__file__)), os.path.dirname(torch.__file__))
    frame: types.FrameType | None = sys._getframe(2)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(inside):
        frame, level = frame.f_back, level + 1
    return level


def explain(op: str, device: str | torch.device | None = None, backend: str | None = None, *,
            soc: str | None = None) -> Decision:
    """What would run operation ``op`` for tensors on ``device``, and why; runs nothing.

    Parameters
    ----------
    op : str
        An operation's ATB name (one of :data:`ascend_kv.dispatch.support.OPERATIONS`) or its function's name,
        e.g. ``"ReshapeAndCacheOperation"`` or ``"reshape_and_cache"``.
    device : str or torch.device, optional
        The tensors' device; by default NPU 0 when an NPU is available, else ``cpu`` (and the
        reason then says why there is no NPU).
    backend : str, optional
        The requested backend; by default the current one (:func:`use_backend`, else
        ``ASCEND_KV_BACKEND``, else ``"auto"``).
    soc : str, optional
        Ask for tensors on an NPU of this SoC (e.g. ``"Ascend910B3"``, ``"Ascend310P3"``) instead of
        ``device``: "does this chip run the operation on the kernels?", answerable on any machine.

    Returns
    -------
    Decision
        The backend that would run (or None when the requested one cannot) and why. Inputs
        are assumed to be inside the kernels' domain (token rows contiguous); a real call also
        checks that.

    Examples
    --------
    >>> ascend_kv.explain("kv_cache", "cpu").backend
    'fallback'
    """
    name = _OP_NAMES.get(op, op)
    if name not in support.OPERATIONS:
        raise ValueError(f"op must be one of {', '.join([*support.OPERATIONS, *_OP_NAMES])}, got {op!r}")
    requested = requested_backend() if backend is None else BACKEND.check(backend, "backend")
    if soc is not None:
        if device is not None:
            raise ValueError(f"pass device or soc, not both (got device {device!r} and soc {soc!r})")
        return dataclasses.replace(_on_soc(name, soc, requested), element_types=element_types_note(),
                                   quantization=quantization_note(name))
    decision = _decide(name, _device_argument(device), requested, None)
    state = runtime.npu_runtime() if device is None else None
    if state is not None and not state.available and requested in ("auto", "npu"):
        decision = dataclasses.replace(decision, reason=f"{decision.reason} (no NPU here: {state.reason})")
    return dataclasses.replace(decision, element_types=element_types_note(), quantization=quantization_note(name))


def _on_soc(op: str, soc: str, requested: str) -> Decision:
    """explain()'s answer for tensors on an NPU of SoC ``soc``, wherever it is asked."""
    if not isinstance(soc, str) or not soc.strip():
        raise ValueError(f"soc must be a SoC name such as 'Ascend910B3', got {soc!r}")
    device = f"an NPU ({soc.strip()})"
    if requested == "fallback":
        return Decision(op, requested, "fallback", f"chosen explicitly ({BACKEND_ENV} or use_backend)", device)
    if requested == "sim":
        return Decision(op, requested, None, f"the host build of the kernels runs on cpu tensors, the tensors are on "
                        f"{device}", device)
    return _soc_decision(op, device, soc.strip(), requested, None)


def quantization_note(op: str) -> str:
    """Which quantizing calls of ``op`` (an ATB name) the Atlas A2/A3 kernels run, and the one place their
    codes may differ from the CPU reference (docs/semantics.md §13.4); empty for the other operations."""
    if op == "ReshapeAndCacheOperation":
        return ("int8 codes run on the AscendC kernel, byte for byte as the CPU reference, except writes with "
                "k_scale/v_scale (divide): the A2/A3 vector Div (DivAlgo::INTRINSIC) is accurate to 1 ulp, so a code "
                "may differ by +-1, only at elements whose float32 quotient lies within 1 ulp of a rounding boundary "
                "(for int8 a k + 0.5; with a float16/bfloat16 compute dtype also a midpoint between two consecutive "
                "values of that dtype), exact bytes everywhere else (the device fallback divides on the same "
                "hardware); k_inv_scale and dynamic (k_scale_cache) writes are exact. Subnormal scales and rows "
                "whose maximum is subnormal may differ (vector units flush subnormals). float8 codes (no fp8 Cast "
                "on A2/A3) and rows longer than the kernel holds in UB run on the device fallback")
    if op == "PagedCacheLoadOperation":
        return ("dequantizing loads of int8 caches run on the AscendC kernel, byte for byte as the CPU reference "
                "(float32 multiplications, one rounding to the output dtype); float8 caches (no fp8 Cast on A2/A3) and "
                "rows longer than the kernel holds in UB run on the device fallback")
    return ""


def element_types_note() -> str:
    """Which element types the operations take, and where that goes beyond Huawei's lists (``explain``, ``info``)."""
    def listed(dtypes: tuple[torch.dtype, ...]) -> str:
        return ", ".join(str(d).removeprefix("torch.") for d in dtypes)

    every, atb = library.cache_dtypes(), library.atb_cache_dtypes()
    beyond = tuple(d for d in every if d not in atb)
    return (f"every 1-, 2- or 4-byte element type ({listed(every)}; the operations move bytes, NZ's "
            f"E = 32 // itemsize); Huawei's ATB documents {listed(atb)}, so {listed(beyond)} go beyond its lists")


def _device_argument(value: str | torch.device | None) -> torch.device:
    if isinstance(value, torch.device):
        return value
    if value is None:
        return torch.device("npu", 0) if runtime.npu_runtime().available else torch.device("cpu")
    if not isinstance(value, str):
        raise TypeError(f"device must be a str or torch.device, got {type(value).__name__}")
    try:
        return torch.device(value)
    except RuntimeError as error:
        raise ValueError(f"device {value!r} is not a device torch knows here (torch_npu adds npu): {error}") from error
