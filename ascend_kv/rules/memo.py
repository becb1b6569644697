"""Structure checks remembered per call signature: a repeated call pays one dictionary look-up.

The structure rules of a call depend only on what its signature holds: per tensor its dtype,
sizes, strides and device, and for a tensor the call writes ``requires_grad`` and whether it is
an inference tensor; the non-tensor arguments; and whether inference mode is on. In a serving
loop the signatures repeat every step (per layer, per phase), so :class:`Memo` keeps what the
rules derived from each (never a tensor) and runs them again only for a signature it has not
seen. A call that raises is not remembered. Addresses are not in the signature: the aliasing
rules run on every call (:mod:`.memory`). Later stages keep what they derive from the structure
alone in the signature's :data:`Derived` dict, which the call's Args carry.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import torch  # noqa: F401  (before _signature, which reads torch.Tensor when it loads)

from ._signature import signature  # compiled at install; _signature.c says what the key holds

#: Signatures remembered per operation before the memo starts afresh (a serving loop has a few dozen).
LIMIT = 4096

_Result = TypeVar("_Result")


#: What later stages derive from a call's structure alone, kept beside its structure per signature
#: (an Args' ``derived``), e.g. the host copier's byte steps. Keys name the stage.
Derived = dict[str, Any]


class Memo(Generic[_Result]):
    """``check(*arguments)`` remembered by ``signature``; ``check`` must depend on nothing else.
    ``written``: the positions of the arguments the call writes.

    Arguments a signature cannot hold (sparse tensors, which have no strides; unhashable values)
    are checked afresh every time, so ``check`` gives its error.
    """

    def __init__(self, check: Callable[..., _Result], written: tuple[int, ...]) -> None:
        self._check = check
        self._written = written
        self._results: dict[Hashable, tuple[Derived, _Result]] = {}

    def checked(self, arguments: tuple[object, ...], shapes_only: bool = False) -> tuple[Derived, _Result]:
        """``(derived, check(*arguments))``: ``derived`` is the signature's dict for later stages (a
        fresh one when the arguments have no signature). With ``shapes_only`` (fake or meta tensors,
        whose signatures are symbolic) ``check(*arguments, True)`` afresh, its derived dict empty."""
        if shapes_only:
            return {}, self._check(*arguments, True)
        try:
            key = signature(arguments, self._written)
            return self._results[key]
        except KeyError:
            pass
        except (RuntimeError, TypeError):  # no signature: check afresh
            return {}, self._check(*arguments)
        result = self._check(*arguments)
        if len(self._results) >= LIMIT:
            self._results.clear()
        remembered: tuple[Derived, _Result] = ({}, result)
        self._results[key] = remembered
        return remembered
