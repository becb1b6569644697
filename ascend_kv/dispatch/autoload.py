"""Import torch so that a broken device backend (torch_npu without CANN) cannot break us.

torch loads the device backends registered under the ``torch.backends`` entry points (torch_npu
is one) at the end of ``import torch`` unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``, and a backend
that fails to load makes ``import torch`` itself raise ("Failed to load the backend extension:
torch_npu"). With torch_npu installed and the CANN runtime missing that is every ``import
torch`` (docs/hardware.md#torch-npu-without-cann). :func:`import_torch`, run by ``ascend_kv/__init__.py`` before anything
imports torch, does torch's autoload itself, one backend at a time, and keeps each failure
instead of raising; :mod:`ascend_kv.dispatch.device` reports it.

Importing this module runs :func:`import_torch` (``ascend_kv/__init__.py`` imports it first).
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import entry_points

AUTOLOAD_ENV = "TORCH_DEVICE_BACKEND_AUTOLOAD"

failures: dict[str, str] = {}
"""Backend name -> why its autoload failed (``"ExceptionType: message"``), for the backends
that :func:`import_torch` loaded itself. Empty when torch did the autoload (or nothing failed)."""


def import_torch() -> None:
    """Import torch; if nobody imported it yet, load its device backends without failing.

    When torch is already imported, or ``TORCH_DEVICE_BACKEND_AUTOLOAD`` is set (the user's
    choice stands), this is a plain ``import torch``. Otherwise torch is imported with the
    autoload switched off, the switch is restored (child processes see the environment as it
    was), and every ``torch.backends`` entry point is loaded and called as torch would, with
    each failure kept in :data:`failures` instead of raised. A working torch_npu is therefore
    loaded exactly as a plain ``import torch`` would load it.
    """
    if "torch" in sys.modules or AUTOLOAD_ENV in os.environ:
        import torch

        return
    os.environ[AUTOLOAD_ENV] = "0"
    try:
        import torch  # noqa: F401
    finally:
        os.environ.pop(AUTOLOAD_ENV, None)
    for extension in _backend_entry_points():
        try:
            extension.load()()
        except Exception as error:  # any failure: CANN missing raises ImportError, bad paths Exception
            failures[extension.name] = f"{type(error).__name__}: {error}"
        finally:
            os.environ.pop(AUTOLOAD_ENV, None)  # torch_npu sets it while it imports


def _backend_entry_points() -> list:
    """The ``torch.backends`` entry points (the Python 3.9 API differs)."""
    try:
        return list(entry_points(group="torch.backends"))
    except TypeError:  # Python 3.9: entry_points() takes no arguments and returns a dict
        return list(entry_points().get("torch.backends", []))


import_torch()
