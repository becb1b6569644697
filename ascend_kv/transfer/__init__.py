"""KV caches across machines (docs/semantics.md §17): transfer-ready caches and their descriptor,
a request's block address lists (C++), and an agent moving blocks on Mooncake's TransferEngine
(the optional extra ``ascend_kv[mooncake]``; importing this package never needs it).
"""

from .addresses import block_address_lists
from .agent import TransferAgent, TransferError
from .caches import TransferCaches, allocate_transfer_caches
from .descriptor import CacheDescriptor, Segment

__all__ = ["CacheDescriptor", "Segment", "TransferAgent", "TransferCaches", "TransferError",
           "allocate_transfer_caches", "block_address_lists"]
