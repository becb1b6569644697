"""ascend_kv: ATB's KV-cache operations for Ascend NPUs, and anywhere else, as PyTorch operators.

The operations (their ATB names in :data:`ascend_kv.dispatch.support.OPERATIONS`): KVCacheOperation,
PagedCacheLoadOperation, ReshapeAndCacheOperation, BlockCopyOperation.

The public names, nothing else; see README.md for a tour.
"""

from .dispatch import autoload  # noqa: F401  (first: imports torch, surviving a broken torch_npu)
from .api.errors import BackendUnavailableError, FallbackWarning
from .dispatch.policy import explain, use_backend
from .dispatch.validation import validate
from .api.layout import nd_to_nz, nz_to_nd
from .api.ops import (
    KVCacheOperation,
    PagedCacheLoadOperation,
    ReshapeAndCacheOperation,
    kv_cache,
    paged_cache_load,
    reshape_and_cache,
)
from .api.block_ops import BlockCopyOperation, block_copy, copy_blocks, swap_blocks
from .api.transfer_ops import gather_blocks, scatter_blocks
from .api.swap_batch import batch_memcpy, swap_blocks_batch
from .api.gather_cache import gather_cache
from .api.state_ops import copy_state_slots, gather_state_slots, scatter_state_slots, state_slot_bytes
from .api.sparse_ops import scatter_nd_update
from . import transfer  # noqa: F401  (ascend_kv.transfer: the agent, descriptors)
from .transfer import allocate_transfer_caches, block_address_lists
from .api.params import BlockCopyParam, KvCacheCfg, KVCacheParam, PagedCacheLoadParam, ReshapeAndCacheParam

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "BlockCopyOperation",
    "BlockCopyParam",
    "FallbackWarning",
    "KVCacheOperation",
    "KVCacheParam",
    "KvCacheCfg",
    "PagedCacheLoadOperation",
    "PagedCacheLoadParam",
    "ReshapeAndCacheOperation",
    "ReshapeAndCacheParam",
    "allocate_transfer_caches",
    "batch_memcpy",
    "block_address_lists",
    "block_copy",
    "copy_blocks",
    "copy_state_slots",
    "explain",
    "gather_blocks",
    "gather_cache",
    "gather_state_slots",
    "kv_cache",
    "nd_to_nz",
    "nz_to_nd",
    "paged_cache_load",
    "reshape_and_cache",
    "scatter_blocks",
    "scatter_nd_update",
    "scatter_state_slots",
    "state_slot_bytes",
    "swap_blocks",
    "swap_blocks_batch",
    "use_backend",
    "validate",
]
