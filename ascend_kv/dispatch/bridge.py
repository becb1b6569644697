"""What the operator library asks Python, and how Python tells it what changed.

The C++ operators keep every decision they take (csrc/dispatch/policy.h), so a call pays a
look-up; the first call of a kind asks here, through operators the library declares and
:mod:`ascend_kv.operators.library` implements with these functions. Python tells the library
when a ``with`` block sets a backend or a validation mode (:func:`set_override`), and when what a
decision depended on changed (:func:`forget`: the environment read again, a kernel library
loaded or dropped, warnings reset).
"""

from __future__ import annotations

import torch


def environment() -> list[str]:
    """``[backend, validation mode]`` from the environment (``ASCEND_KV_BACKEND``,
    ``ASCEND_KV_VALIDATE``); an unknown value raises, naming the variable."""
    from . import policy, validation

    return [policy.environment_backend(), validation.environment_mode()]


def decide(op: str, device: torch.device, requested: str, outside: str) -> str:
    """The backend that runs operation ``op`` (its ATB name) on ``device`` when ``requested`` is
    asked for; ``outside``: why the kernels cannot take the call's tensors, empty when they can.
    Raises :class:`~ascend_kv.BackendUnavailableError` when the requested backend cannot run; a
    fallback on an NPU warns once per reason (:class:`~ascend_kv.FallbackWarning`)."""
    from . import policy

    return policy.choose(op, device, requested, outside or None)


def storage_format(tensor: torch.Tensor) -> int:
    """The ACL storage format of an NPU tensor, from torch_npu, or -1 when nothing here can tell."""
    from . import device

    code = device.storage_format(tensor)
    return -1 if code is None else code


def on_trace() -> None:
    """Calls are being traced (``torch.compile``, ``torch.export``, FakeTensorMode): register the compile rule."""
    from ..operators import functionalization

    functionalization.install()


def set_override(setting: str, value: str | None) -> None:
    """This thread's ``with`` block value of ``setting`` (``"backend"`` or ``"validate"``), or none."""
    torch.ops.ascend_kv._set_override(setting, value)


def forget() -> None:
    """Drop what the operator library kept: the environment's settings and every decision."""
    torch.ops.ascend_kv._forget()
