"""Where the operators' calls ran, as the tools report it: ``torch.ops.ascend_kv._runs()``.

The operators count each call where it ran: the host paths (CPU tensors, ``cpu_fallback/host.cpp``,
over torch's intra-op threads), the kernels' host build (``sim``), the NPU kernels (``kernels``)
or the device fallback in ATen. A tool reads the counts before and after a call and names the
places whose counts grew. (``swap_blocks`` is not counted: it has no kernel, see its docstring.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

#: The places, in the order of ``torch.ops.ascend_kv._runs()``.
PLACES = ("host paths", "sim", "kernels", "device fallback")
#: What :func:`where` says when no count grew.
UNCOUNTED = "not counted"

T = TypeVar("T")


def counts() -> list[int]:
    """The operators' counts of calls per place (:data:`PLACES`), so far in this process."""
    return list(torch.ops.ascend_kv._runs())


def where(before: Sequence[int], after: Sequence[int]) -> str:
    """The places whose count grew from ``before`` to ``after``, joined by ``" + "`` (:data:`UNCOUNTED` if none)."""
    grew = [place for place, a, b in zip(PLACES, before, after) if b > a]
    return " + ".join(grew) if grew else UNCOUNTED


def ran(call: Callable[[], T]) -> tuple[T, str]:
    """``call()``'s result, and where the calls it made ran (:func:`where`)."""
    before = counts()
    result = call()
    return result, where(before, counts())


def expected_place(backend: str | None, device: torch.device | str) -> str | None:
    """Where a call the policy gave to ``backend`` runs for tensors on ``device`` (None: no such backend)."""
    on_host = torch.device(device).type == "cpu"
    return {"fallback": "host paths" if on_host else "device fallback", "sim": "sim", "npu": "kernels"}.get(
        backend or "")
