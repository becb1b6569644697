"""The device fallback: every operation as torch operations on the tensors' own device, with no host reads.

Index tensors may live on the device, so nothing here reads an index value back to the host
(no ``.item()``, ``.tolist()``, ``nonzero`` or boolean-mask indexing): every size comes from a
shape, and index values are only ever operands of tensor operations. Index values nobody
checked follow the safe semantics of docs/semantics.md ("Index values nobody checked"):
anything out of range is skipped and nothing outside the given tensors is read or written.
Index arithmetic is exact (as with Python ints): where an int64 sum or difference could wrap,
the bound is tested without forming it, so a wrapped value never lands in range.

Temporary memory is proportional to the tokens written or the output rows, never to a cache:
a few int64 index vectors of ``ntokens`` (``kv_cache``), ``rows`` (``paged_cache_load``) or
``len(slot_mapping)`` (``reshape_and_cache``) elements, and two row buffers of the same length
per written tensor.

Every copy moves integer views of the data (same width), so NaN payloads and every other bit
pattern arrive unchanged.
"""

from __future__ import annotations

import torch

from ascend_kv.rules.forms import BlockCopyArgs, KvCacheArgs, PagedLoadArgs, ReshapeAndCacheArgs

_SAME_WIDTH_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def kv_cache(args: KvCacheArgs) -> None:
    """Write ``args.new_kv`` into ``args.past[layer_id]`` in place, skipping out-of-range tokens.

    Source row ``src`` of ``new_kv`` ``[ntokens, hidden]`` belongs to the batch entry whose
    share of the (clamped) ``seq_len`` prefix sums covers it, and goes to
    ``past[layer_id, b, token_offset[b] - seq_len[b] + j]`` (``j`` its place in the entry) when
    that position and ``layer_id`` are in range.

    One accumulating ``index_put_`` on the integer bits of ``past`` writes all ``ntokens`` rows:
    a written token adds ``new - old`` (wrapping integer arithmetic, so the sum is exactly the
    new bits) to its own destination, which no other token has; a skipped token adds zero to row
    0 of its entry, so the bytes of every place the call does not name stay as they are.

    Temporary memory: about a dozen int64 or bool ``[ntokens]`` vectors and two
    ``[ntokens, hidden]`` row buffers (the gathered rows, then the selected ones).
    """
    past, new_kv = _bits(args.past), _bits(args.new_kv)
    layers, batch, max_seq_len, _ = past.shape
    ntokens = new_kv.shape[0]
    if ntokens == 0 or past.numel() == 0:
        return
    device = past.device
    layer = _layer(args.layer_id, device)                                        # [1]
    layer_ok = (layer >= 0) & (layer < layers)
    layer = layer.clamp(0, layers - 1)
    seq_len, token_offset = args.seq_len.long(), args.token_offset.long()

    lengths = seq_len.clamp(0, ntokens)                                          # [batch] tokens read per entry
    ends = lengths.cumsum(0)                                                     # [batch] first row after each entry
    src = torch.arange(ntokens, device=device)                                   # [ntokens]
    entry = torch.searchsorted(ends, src, right=True)                            # batch when no entry covers src
    covered = entry < batch
    entry = entry.clamp(max=batch - 1)
    j = src - (ends[entry] - lengths[entry])                                     # place within the entry
    back = seq_len[entry] - j                                                    # >= 1 where covered: no wrap
    offset = token_offset[entry]
    # dst = offset - back; test 0 <= dst < max_seq_len without forming a wrapping difference.
    position_ok = (offset >= back) & (offset - back < max_seq_len)
    written = covered & position_ok & layer_ok                                   # [ntokens]
    position = offset - back

    position = torch.where(written, position, 0)                                 # skipped: add zero at row 0
    layers_index = layer.expand(ntokens)

    _add_difference(past, (layers_index, entry, position), new_kv.index_select(0, src), written)


def paged_cache_load(args: PagedLoadArgs) -> None:
    """Gather every requested token into ``args.key`` and ``args.value`` in place, skipping out-of-range ones.

    Works output row by output row: row ``r`` finds its writer (batch entry ``b`` and token
    ``j``), the block-table column ``seq_starts[b] // block_size + j // block_size`` and the
    block id there; a row whose writer, column or block is out of range keeps its bits. Every
    output element is written exactly once (``torch.where`` of the gathered token and its own
    bits), so there is nothing to race.

    In cumsum mode a decreasing ``context_lens`` makes entries' row ranges overlap. A row then
    takes the token of the entry that reaches furthest among those starting at or before it
    (ties: one of them); if that token's column or block is out of range the row keeps its bits,
    even when another covering entry's token was in range. Rows with a single covering entry,
    which is every row when ``context_lens`` does not decrease, get exactly that entry's token.

    Temporary memory: about a dozen int64 or bool ``[rows]`` vectors (``rows`` the larger
    output's), a few ``[batch]`` ones, and per output two buffers of its size (the gathered
    tokens, then the selected ones).
    """
    key, value = args.outputs()
    rows = max(key.shape[0], value.shape[0])
    batch, columns = args.block_table.shape
    nd = args.geometry.nd
    num_blocks = args.geometry.num_blocks
    block_size = args.geometry.block_size
    if rows == 0 or batch == 0 or columns == 0 or num_blocks == 0 or block_size == 0:
        if args.zero_fill:                                                       # no token has a valid block
            clear_loaded_rows(args)
        return
    lengths, first_rows = _entry_rows(args.context_lens.long(), args.cumsum, rows)
    row = torch.arange(rows, device=key.device)                                      # [rows]
    entry, covered = _writer(first_rows, lengths, row)
    j = row - first_rows[entry]                                                  # token within its entry
    first_column = (
        torch.div(args.seq_starts.long(), block_size, rounding_mode="floor")[entry]
        if args.seq_starts is not None else torch.zeros_like(j)
    )
    column = first_column + torch.div(j, block_size, rounding_mode="floor")      # wraps only above columns
    column_ok = (column >= 0) & (column < columns)
    block = args.block_table[entry, column.clamp(0, columns - 1)].long()
    valid = covered & column_ok & (block >= 0) & (block < num_blocks)            # [rows]
    block = torch.where(valid, block, 0)
    slot = torch.where(valid, j, 0) % block_size
    zeroed = covered & ~valid if args.zero_fill else None                         # zero-fill mode: invalid blocks
    for cache, out in ((args.key_cache, key), (args.value_cache, value)):
        n = out.shape[0]
        _gather_into(nd, cache, out, block[:n], slot[:n], valid[:n], None if zeroed is None else zeroed[:n])


def clear_loaded_rows(args: PagedLoadArgs) -> None:
    """Zero every output row a batch entry covers (``zero_fill`` before the kernels, which write the
    rows of valid blocks and skip the others), reading no index value back."""
    outputs = args.outputs()
    rows = max(out.shape[0] for out in outputs)
    if rows == 0 or args.block_table.shape[0] == 0:
        return
    lengths, first_rows = _entry_rows(args.context_lens.long(), args.cumsum, rows)
    _, covered = _writer(first_rows, lengths, torch.arange(rows, device=outputs[0].device))
    for out in outputs:
        target = _bits(out)
        mask = covered[: out.shape[0]].reshape(-1, *([1] * (out.dim() - 1)))
        target.copy_(torch.where(mask, torch.zeros((), dtype=target.dtype, device=target.device), target))


def reshape_and_cache(args: ReshapeAndCacheArgs) -> None:
    """Write token ``i`` of ``key`` (and ``value``) to slot ``slot_mapping[i]`` of each cache in place.

    Slots outside ``[0, num_blocks * block_size)`` (padding, or values nobody checked) are
    skipped; tokens from ``len(slot_mapping)`` on are never read. A slot several tokens name
    takes the last of them.

    One accumulating ``index_put_`` per cache, on its integer bits, writes all ``n =
    len(slot_mapping)`` tokens: the last token naming a slot (found by a stable sort of the
    slots) adds ``new - old`` to it, exactly the new bits in wrapping integer arithmetic; every
    other token adds zero: an earlier duplicate to its slot, a skipped one to token ``(0, 0)``, so
    the bytes of every slot the call does not name stay as they are. An NZ cache ``[num_blocks, T // E, block_size, E]`` is written through its
    ``[num_blocks, block_size, T // E, E]`` transposed view, one token per index as in ND.

    Temporary memory: about a dozen int64 or bool ``[n]`` vectors and, per cache, two
    ``[n, row]`` buffers (the gathered rows, then the selected ones).
    """
    nd = args.geometry.nd
    num_blocks = args.geometry.num_blocks
    block_size = args.geometry.block_size
    n = args.slot_mapping.shape[0]
    if n == 0 or num_blocks * block_size == 0:
        return
    slots = args.slot_mapping.long()                                             # [n]
    written = (slots >= 0) & (slots < num_blocks * block_size)
    ranked = torch.where(written, slots, -1)                                     # skipped tokens sort first
    ordered, order = torch.sort(ranked, stable=True)
    source = order[torch.searchsorted(ordered, ranked, right=True) - 1]          # the last token naming each slot

    last = written & (source == torch.arange(n, device=slots.device))           # the token each written slot takes
    slot = torch.where(written, slots, 0)                                        # skipped: add zero at slot 0
    block, position = torch.div(slot, block_size, rounding_mode="floor"), slot % block_size
    _scatter(nd, args.key_cache, args.key, block, position, last)
    if args.value is not None and args.value_cache is not None:
        _scatter(nd, args.value_cache, args.value, block, position, last)


def output_rows(context_lens: torch.Tensor, cumsum: bool) -> torch.Tensor:
    """Rows of the outputs an allocating ``paged_cache_load`` creates, as a 0-d int64 tensor on ``context_lens``' device.

    ``sum(context_lens)``, or ``context_lens[-1]`` in cumsum mode, never below 0; reading it
    (``.item()``) is the allocating form's one host read. In default mode each length counts
    at most ``(2**63 - 1) // batch``, so the sum cannot wrap: it is exact whenever no length is
    larger, and otherwise at least that bound, more rows than any allocation can hold.
    """
    lens = context_lens.long()
    if cumsum:
        return lens[-1].clamp(min=0)
    return lens.clamp(0, (2**63 - 1) // max(lens.shape[0], 1)).sum()


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t`` viewed as integers of its element width (same memory, same strides)."""
    return t.view(_SAME_WIDTH_INT[t.element_size()])


def _layer(layer_id: int | torch.Tensor, device: torch.device) -> torch.Tensor:
    """``layer_id`` as a ``[1]`` int64 tensor on ``device`` (a tensor is reshaped, never read)."""
    if isinstance(layer_id, torch.Tensor):
        return layer_id.reshape(1).long()
    return torch.full((1,), layer_id, dtype=torch.int64, device=device)


def _entry_rows(context_lens: torch.Tensor, cumsum: bool, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each batch entry's token count and first output row, ``[batch]`` int64 each.

    Counts are clamped to ``[0, rows]``. First rows are clamped to ``[-rows - 1, rows]``, which
    changes no covered row in ``[0, rows)`` and keeps ``first + count`` from wrapping.
    """
    if cumsum:
        low, high = context_lens[:-1], context_lens[1:]
        difference = high - low                                                  # negative here: wrapped, > rows
        lengths = torch.where(high > low, torch.where(difference < 0, rows, difference.clamp(max=rows)), 0)
        first_rows = low
    else:
        lengths = context_lens.clamp(0, rows)
        first_rows = lengths.cumsum(0) - lengths
    return lengths, first_rows.clamp(-rows - 1, rows)


def _writer(first_rows: torch.Tensor, lengths: torch.Tensor, row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each output row, an entry whose range ``[first, first + length)`` covers it, and whether one does.

    Entries sorted by first row; among those starting at or before the row, the one that
    reaches furthest (a running maximum) covers it if any does. Returns ``[rows]`` entry
    indices (0 where uncovered) and the ``[rows]`` covered mask.
    """
    order = torch.argsort(first_rows, stable=True)                               # [batch]
    reach, reacher = torch.cummax((first_rows + lengths)[order], 0)              # furthest end so far, and whose
    started = torch.searchsorted(first_rows[order], row, right=True) - 1         # last sorted entry starting <= row
    at = started.clamp(min=0)
    covered = (started >= 0) & (reach[at] > row)
    return torch.where(covered, order[reacher[at]], 0), covered


def _scatter(nd: bool, cache: torch.Tensor, tokens: torch.Tensor, block: torch.Tensor, position: torch.Tensor,
             last: torch.Tensor) -> None:
    """``token(cache, block[i], position[i]) = tokens[i]`` for every ``i`` where ``last[i]``; the rest add zero.

    ``cache`` ND ``[num_blocks, block_size, heads, head_size]`` or NZ ``[num_blocks, T // E,
    block_size, E]``; ``tokens`` ``[num_tokens, heads, head_size]``; the rest ``[n]``.
    """
    if cache.numel() == 0:
        return
    target = _bits(cache) if nd else _bits(cache).transpose(1, 2)               # [num_blocks, block_size, ...]
    rows = _bits(tokens)[: block.shape[0]].reshape(block.shape[0], *target.shape[2:])
    _add_difference(target, (block, position), rows, last)


def _add_difference(target: torch.Tensor, index: tuple[torch.Tensor, ...], rows: torch.Tensor,
                    written: torch.Tensor) -> None:
    """``target[index][i] = rows[i]`` where ``written[i]``, by adding ``rows - target[index]`` to the
    integer bits (exact, wrapping); elsewhere add zero, which changes no byte.

    ``target`` integer bits; ``index`` tensors of ``[n]``; ``rows`` ``[n, *target[index].shape[1:]]``;
    ``written`` ``[n]`` bool, with no two written entries naming one place.
    """
    difference = rows - target[index]
    mask = written.reshape(-1, *([1] * (rows.dim() - 1)))
    target.index_put_(index, torch.where(mask, difference, torch.zeros_like(difference)), accumulate=True)


def _gather_into(nd: bool, cache: torch.Tensor, out: torch.Tensor, block: torch.Tensor, slot: torch.Tensor,
                 valid: torch.Tensor, zeroed: torch.Tensor | None = None) -> None:
    """``out[r] = token(cache, block[r], slot[r])`` where ``valid[r]``, zeros where ``zeroed[r]``; other
    rows keep their bits.

    ``out`` ``[n, heads, head_size]`` (ND) or ``[n, T]`` (NZ, from ``[num_blocks, T // E,
    block_size, E]``); ``block``, ``slot``, ``valid``, ``zeroed`` ``[n]``.
    """
    cache, target = _bits(cache), _bits(out)
    tokens = cache[block, slot] if nd else cache[block, :, slot, :].reshape(out.shape)
    shape = (-1, *([1] * (out.dim() - 1)))
    kept = target if zeroed is None else torch.where(zeroed.reshape(shape), torch.zeros((), dtype=target.dtype,
                                                                                         device=target.device), target)
    target.copy_(torch.where(valid.reshape(shape), tokens, kept))


def block_copy(args: BlockCopyArgs) -> None:
    """Copy block ``src[i]`` of every cache to its block ``dst[j]`` for each destination ``j`` of source
    ``i``, in place, skipping out-of-range values (``block_copy`` and ``copy_blocks`` alike).

    Destination ``j`` belongs to the first source whose running end ``cum_sum[i]`` exceeds ``j``
    (a ``searchsorted``; without ``cum_sum``, source ``j``); it is copied when that source exists
    and both blocks are in ``[0, num_blocks)``. Values nobody checked (a decreasing ``cum_sum``,
    a block both source and destination, a destination named twice) give some order of the
    copies, never a byte outside the caches: every source is gathered before any destination is
    written. One ``index_copy_`` per cache writes all destinations, race-free as in
    :func:`reshape_and_cache`: a skipped copy repeats the first copied one, and with none copied
    every write puts block 0's own bits back.

    Temporary memory: a few int64 or bool ``[len(dst)]`` vectors and, per cache, one buffer of
    ``len(dst)`` blocks.
    """
    num_blocks, copies, pairs = args.caches[0].shape[0], args.dst.shape[0], args.src.shape[0]
    if copies == 0 or pairs == 0 or num_blocks == 0:
        return
    device = args.dst.device
    destination = args.dst.long()                                                # [copies]
    if args.cum_sum is None:
        pair = torch.arange(copies, device=device)
    else:
        pair = torch.searchsorted(args.cum_sum.long(), torch.arange(copies, device=device), right=True)
    source = args.src.long()[pair.clamp(max=pairs - 1)]
    written = (pair < pairs) & (source >= 0) & (source < num_blocks) & (destination >= 0) & (destination < num_blocks)
    first = torch.argmax(written.to(torch.int32)).reshape(1)                     # a copied destination, if any
    any_written = written.index_select(0, first)                                 # [1]
    source = torch.where(written, source, torch.where(any_written, source.index_select(0, first), 0))
    destination = torch.where(written, destination, torch.where(any_written, destination.index_select(0, first), 0))
    for cache in args.caches:
        if cache.numel():
            blocks = _bits(cache)
            blocks.index_copy_(0, destination, blocks.index_select(0, source))
