"""The package's own exception and warning types."""

from __future__ import annotations


class BackendUnavailableError(RuntimeError):
    """An explicitly chosen backend cannot run here; the message says why."""


class FallbackWarning(UserWarning):
    """A call on an NPU runs on the vectorized fallback, not the kernels (issued once per reason)."""
