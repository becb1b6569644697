"""Structure checks remembered per call signature: a repeated call pays one dictionary look-up.

The structure rules of a call depend only on what its signature holds: per tensor its dtype,
sizes, strides, device, ``requires_grad`` and whether it is an inference tensor; the non-tensor
arguments; and whether inference mode is on. In a serving loop the signatures repeat every step
(per layer, per phase), so :class:`Memo` keeps what the rules derived from each (never a tensor)
and runs them again only for a signature it has not seen. A call that raises is not remembered.
Addresses are not in the signature: the aliasing rules run on every call (:mod:`.memory`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import torch

#: Signatures remembered per operation before the memo starts afresh (a serving loop has a few dozen).
LIMIT = 4096

_Result = TypeVar("_Result")


def signature(arguments: tuple[object, ...]) -> Hashable:
    """What the structure rules of a call with these arguments depend on.

    A host tensor's device is ``True`` (``is_cpu``, cheaper than a device object); inside
    inference mode, whether a tensor is an inference tensor makes no difference to the rules.
    """
    if torch.is_inference_mode_enabled():
        return (True, *[(a.dtype, a.shape, a.stride(), a.is_cpu or a.device, a.requires_grad)
                        if isinstance(a, torch.Tensor) else a for a in arguments])
    return (False, *[(a.dtype, a.shape, a.stride(), a.is_cpu or a.device, a.requires_grad, a.is_inference())
                     if isinstance(a, torch.Tensor) else a for a in arguments])


class Memo(Generic[_Result]):
    """``check(*arguments)`` remembered by :func:`signature`; ``check`` must depend on nothing else.

    Arguments a signature cannot hold (sparse tensors, which have no strides; unhashable values)
    are checked afresh every time, so ``check`` gives its error.
    """

    def __init__(self, check: Callable[..., _Result]) -> None:
        self._check = check
        self._results: dict[Hashable, _Result] = {}

    def __call__(self, *arguments: object) -> tuple[Hashable | None, _Result]:
        """``(signature, check(*arguments))``; the signature None when the arguments have none."""
        try:
            key = signature(arguments)
            return key, self._results[key]
        except KeyError:
            pass
        except (RuntimeError, TypeError):  # no signature: check afresh
            return None, self._check(*arguments)
        return key, remember(self._results, key, self._check(*arguments))

    def clear(self) -> None:
        """Forget every signature (for tests of the rules themselves)."""
        self._results.clear()


def remember(results: dict[Hashable, _Result], key: Hashable, result: _Result) -> _Result:
    """``result``, kept in ``results`` under ``key`` (which starts afresh at :data:`LIMIT` entries)."""
    if len(results) >= LIMIT:
        results.clear()
    results[key] = result
    return result


def derived(results: dict[Hashable, _Result], key: Hashable | None, derive: Callable[[], _Result]) -> _Result:
    """``derive()``, remembered in ``results`` under a call's signature ``key`` (an Args' ``signature``):
    for what a later stage derives from a call's structure alone. ``key`` None: derived afresh."""
    if key is None:
        return derive()
    try:
        return results[key]
    except KeyError:
        return remember(results, key, derive())
