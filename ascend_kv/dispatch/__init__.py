"""Which backend runs a call: the support matrix, SoC detection, the dispatch policy and its settings.

Importing this package imports nothing (``ascend_kv/__init__.py`` imports :mod:`.autoload` first,
before torch).
"""
