"""A setting with a few named values: a context manager sets it for a block, else an environment
variable (read once), else its default. The backend choice and the validation mode are two."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Iterator


class Setting:
    """One setting.

    Parameters
    ----------
    env : str
        The environment variable, e.g. ``"ASCEND_KV_BACKEND"``; read at the first
        :meth:`current` call, again after ``environment.cache_clear()``.
    choices : tuple of str
        The values it takes (lower case; the variable is matched case-insensitively).
    default : str
        The value when neither a ``with`` block nor the variable sets one.
    argument : str
        How errors name a value given in code, e.g. ``"backend"``.
    """

    def __init__(self, env: str, choices: tuple[str, ...], default: str, argument: str) -> None:
        self.env, self.choices, self.default, self.argument = env, choices, default, argument
        self._chosen: contextvars.ContextVar[str | None] = contextvars.ContextVar(env, default=None)
        self.environment = functools.cache(self._read_environment)

    def check(self, value: str, source: str) -> str:
        """``value`` itself, or ``ValueError`` naming ``source`` when it is not one of the choices."""
        if value not in self.choices:
            raise ValueError(f"{source} must be one of {', '.join(self.choices)}, got {value!r}")
        return value

    def _read_environment(self) -> str:
        """The variable's value, or the default when unset (an unknown value raises every time)."""
        return self.check(os.environ.get(self.env, "").strip().lower() or self.default, self.env)

    def current(self) -> str:
        """The innermost ``with`` block's value, else the variable's, else the default."""
        chosen = self._chosen.get()
        return chosen if chosen is not None else self.environment()

    @contextlib.contextmanager
    def use(self, value: str) -> Iterator[None]:
        """Set the value for the ``with`` block (and the calls made in it)."""
        token = self._chosen.set(self.check(value, self.argument))
        try:
            yield
        finally:
            self._chosen.reset(token)
