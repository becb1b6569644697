"""Other libraries' names for ascend_kv's operations, for code written against them.

:mod:`ascend_kv.compat.torch_npu`: torch_npu's cache ops (``_npu_reshape_and_cache``,
``npu_scatter_pa_kv_cache``, ``npu_gather_pa_kv_cache``, ``atb.npu_paged_cache_load``,
``npu_format_cast``), with torch_npu's signatures and semantics (docs/porting_from_torch_npu.md).
"""
