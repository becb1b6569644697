"""Other libraries' names for ascend_kv's operations, for code written against them.

:mod:`ascend_kv.compat.torch_npu`: torch_npu's cache ops (``_npu_reshape_and_cache``,
``npu_scatter_pa_kv_cache``, ``npu_gather_pa_kv_cache``, ``atb.npu_paged_cache_load``,
``npu_scatter_nd_update_``, and the quantizer ``npu_dynamic_quant``), with
torch_npu's signatures, semantics and argument names in errors (docs/porting_from_torch_npu.md);
:mod:`ascend_kv.compat.vllm`: vLLM's ``reshape_and_cache_flash`` (fp8 caches by ``kv_cache_dtype``);
:mod:`ascend_kv.compat.vllm_ascend`: vllm-ascend's ``torch.ops._C_ascend`` ops on a CPU (``register()``:
``npu_scatter_nd_update_v2``, ``swap_blocks_batch``);
:mod:`ascend_kv.compat.formats`: its storage-format helpers (``npu_format_cast``,
``get_npu_format``, ``empty_with_format``) on any device.
"""
