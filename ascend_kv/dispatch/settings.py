"""A setting with a few named values: a context manager sets it for a block, else an environment
variable (read once), else its default. The backend choice and the validation mode are two.

The first read of any setting's variable checks every setting's variable, so a misspelled one
is an error at the first call even when the call never needs that setting. The operator
library keeps its own copy of each (it reads them on every call): a ``with`` block's value is
told to it for the block's thread, and reading the environment again makes it forget what it
read (:mod:`.bridge`)."""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Iterator

from . import bridge


class SettingError(ValueError):
    """A setting's value (from its environment variable or given in code) is not one of its choices."""


_SETTINGS: list[Setting] = []

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
    native : str
        The operator library's name of the setting (``"backend"`` or ``"validate"``).
    """

    def __init__(self, env: str, choices: tuple[str, ...], default: str, argument: str, native: str) -> None:
        self.env, self.choices, self.default, self.argument, self.native = env, choices, default, argument, native
        self._chosen: contextvars.ContextVar[str | None] = contextvars.ContextVar(env, default=None)
        self.environment = _Environment(self._read_environment)
        _SETTINGS.append(self)

    def check(self, value: str, source: str) -> str:
        """``value`` itself, or :class:`SettingError` naming ``source`` when it is not one of the choices."""
        if value not in self.choices:
            raise SettingError(f"{source} must be one of {', '.join(self.choices)}, got {value!r}")
        return value

    def _variable(self) -> str:
        """The variable's value, or the default when unset; an unknown value raises."""
        return self.check(os.environ.get(self.env, "").strip().lower() or self.default, self.env)

    def _read_environment(self) -> str:
        """:meth:`_variable`, after checking every setting's variable (an unknown value raises every time)."""
        for setting in _SETTINGS:
            setting._variable()
        return self._variable()

    def current(self) -> str:
        """The innermost ``with`` block's value, else the variable's, else the default."""
        chosen = self._chosen.get()
        return chosen if chosen is not None else self.environment()

    @contextlib.contextmanager
    def use(self, value: str) -> Iterator[None]:
        """Set the value for the ``with`` block (and the calls made in it)."""
        token = self._chosen.set(self.check(value, self.argument))
        bridge.set_override(self.native, value)
        try:
            yield
        finally:
            self._chosen.reset(token)
            bridge.set_override(self.native, self._chosen.get())


class _Environment:
    """A setting's environment value, read once; ``cache_clear()`` reads it again (and makes the
    operator library forget its copy)."""

    def __init__(self, read: Callable[[], str]) -> None:
        self._read = read
        self._value: str | None = None

    def __call__(self) -> str:
        if self._value is None:
            self._value = self._read()
        return self._value

    def cache_clear(self) -> None:
        self._value = None
        bridge.forget()
