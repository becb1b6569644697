"""``ascend-kv demo``: every operation in every mode on realistic shapes, checked against the
reference, with the backend that ran (and why) and how long it took.

Each scenario's outputs are compared bit for bit with :mod:`ascend_kv.tools.reference`. Per
scenario the demo prints the backend :func:`ascend_kv.explain` names for the call's device and
why, where the call ran by the operators' own counts (``torch.ops.ascend_kv._runs()``: host
paths, sim, kernels or device fallback, :mod:`ascend_kv.tools.runs`), and the median time; a
call that ran anywhere but where ``explain`` said fails like a wrong byte."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..api.layout import nd_to_nz
from ..api.ops import kv_cache, paged_cache_load, reshape_and_cache
from ..api.params import KvCacheCfg
from ..dispatch import device, policy
from . import reference, runs

ND, NZ = KvCacheCfg.K_CACHE_V_CACHE_ND, KvCacheCfg.K_CACHE_V_CACHE_NZ


@dataclass
class Scenario:
    """One demo call of operation ``op`` (an ATB name) on tensors on ``device``: ``run`` calls the
    op, ``reference`` the reference; both return outputs. ``run_into``: for an allocating call,
    the same call writing preallocated outputs. ``decide``: what runs the call and why, when
    :func:`ascend_kv.explain` does not know the operation."""

    name: str
    op: str
    run: Callable[[], tuple[torch.Tensor, ...]]
    reference: Callable[[], tuple[torch.Tensor, ...]]
    device: torch.device
    bytes_moved: int
    run_into: Callable[[], tuple[torch.Tensor, ...]] | None = None
    decide: Callable[[], policy.Decision] | None = None

    def decision(self) -> policy.Decision:
        """What runs the call, and why: :func:`ascend_kv.explain` for its operation and device."""
        return self.decide() if self.decide is not None else policy.explain(self.op, self.device)


def _payload(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """Random values of ``dtype``, drawn in that dtype (no float32 copy of a large cache)."""
    if dtype == torch.int8:
        return torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)
    return torch.randn(shape, generator=g, dtype=dtype)


def kv_cache_scenario(name: str, seq_len: list[int], hidden: int, dtype: torch.dtype, *, four_d: bool = False,
                      max_seq_len: int, layers: int = 2, g: torch.Generator) -> Scenario:
    """Write ``seq_len[i]`` new tokens per sequence after a random amount already cached."""
    past = _payload((layers, len(seq_len), max_seq_len, hidden), dtype, g)
    offsets = [n + int(torch.randint(0, max_seq_len - n + 1, (1,), generator=g)) for n in seq_len]
    new_kv = _payload((sum(seq_len), hidden), dtype, g)
    if four_d:
        new_kv = new_kv.reshape(len(seq_len), -1, 8, hidden // 8) if len(set(seq_len)) == 1 else new_kv
    args = (new_kv, layers - 1, past, torch.tensor(offsets, dtype=torch.int32), torch.tensor(seq_len, dtype=torch.int32))
    expected = past.clone()
    return Scenario(
        name, "KVCacheOperation",
        run=lambda: (kv_cache(*args),),
        reference=lambda: (reference.kv_cache(new_kv, layers - 1, expected, *args[3:]),),
        device=past.device,
        bytes_moved=2 * new_kv.numel() * new_kv.element_size(),
    )


def paged_scenario(name: str, lens: list[int], layout: KvCacheCfg, *, heads: int = 8, head_k: int = 128,
                   head_v: int = 128, block_size: int = 128, key_dtype: torch.dtype = torch.float16,
                   value_dtype: torch.dtype | None = None, cumsum: bool = False, seq_starts: bool = False,
                   give_outputs: bool = False, g: torch.Generator) -> Scenario:
    """Gather ``lens[b]`` tokens per sequence from a cache whose blocks are shuffled."""
    value_dtype = value_dtype or key_dtype
    starts = [int(torch.randint(0, 3 * block_size, (1,), generator=g)) if seq_starts else 0 for _ in lens]
    columns = [s // block_size + -(-n // block_size) for s, n in zip(starts, lens)]
    num_blocks = sum(columns) + 4
    table = torch.full((len(lens), max(columns)), -1, dtype=torch.int32)
    ids = torch.randperm(num_blocks, generator=g).to(torch.int32)
    for b, width in enumerate(columns):
        table[b, :width] = ids[sum(columns[:b]): sum(columns[:b]) + width]
    key_cache = _payload((num_blocks, block_size, heads, head_k), key_dtype, g)
    value_cache = _payload((num_blocks, block_size, heads, head_v), value_dtype, g)
    if layout == NZ:
        key_cache, value_cache = nd_to_nz(key_cache), nd_to_nz(value_cache)
    context_lens = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()] if cumsum else lens, dtype=torch.int32)
    kwargs: dict = {"kv_cache_cfg": layout, "cumsum": cumsum,
                    "seq_starts": torch.tensor(starts, dtype=torch.int32) if seq_starts else None}
    rows = sum(lens)
    key_row, value_row = ((heads, head_k), (heads, head_v)) if layout == ND else ((heads * head_k,), (heads * head_v,))
    key_out, value_out = torch.zeros((rows, *key_row), dtype=key_dtype), torch.zeros((rows, *value_row), dtype=value_dtype)
    if give_outputs:
        kwargs.update(key=key_out, value=value_out)
    args = (key_cache, value_cache, table, context_lens)
    token_bytes = (key_cache[0].numel() * key_cache.element_size() + value_cache[0].numel()
                   * value_cache.element_size()) // block_size
    return Scenario(
        name, "PagedCacheLoadOperation",
        run=lambda: paged_cache_load(*args, **kwargs),
        reference=lambda: reference.paged_cache_load(*args, **{k: v for k, v in kwargs.items()
                                                              if k not in ("key", "value")}),
        device=key_cache.device,
        bytes_moved=2 * sum(lens) * token_bytes,
        run_into=None if give_outputs else lambda: paged_cache_load(*args, **kwargs, key=key_out, value=value_out),
    )


def write_scenario(name: str, lens: list[int], layout: str, *, heads: int = 8, head_k: int = 128, head_v: int | None = 128,
                   block_size: int = 128, dtype: torch.dtype = torch.float16, padding: int = 0,
                   g: torch.Generator) -> Scenario:
    """Write ``lens[b]`` new tokens per sequence into its own blocks, dealt at random; ``padding``
    slots of -1 after them (a batch padded for graph capture); ``head_v`` None: key only."""
    per_seq = [-(-n // block_size) for n in lens]
    num_blocks = sum(per_seq) + 2
    blocks = torch.randperm(num_blocks, generator=g).tolist()
    slots, first = [], 0
    for n, count in zip(lens, per_seq):
        slots += [blocks[first + j // block_size] * block_size + j % block_size for j in range(n)]
        first += count
    tokens = len(slots) + padding
    slot_mapping = torch.tensor(slots + [-1] * padding, dtype=torch.int32)
    key = _payload((tokens, heads, head_k), dtype, g)
    value = None if head_v is None else _payload((tokens, heads, head_v), dtype, g)

    def cache(head_size: int) -> torch.Tensor:
        nd = _payload((num_blocks, block_size, heads, head_size), dtype, g)
        return nd if layout == "nd" else nd_to_nz(nd)

    key_cache = cache(head_k)
    value_cache = None if head_v is None else cache(head_v)
    args = (key, value, key_cache, value_cache, slot_mapping)
    expected = (key, value, key_cache.clone(), None if value_cache is None else value_cache.clone(), slot_mapping)

    def written(caches: tuple[torch.Tensor, torch.Tensor | None]) -> tuple[torch.Tensor, ...]:
        return tuple(t for t in caches if t is not None)

    return Scenario(
        name, "ReshapeAndCacheOperation",
        run=lambda: written(reshape_and_cache(*args, kv_cache_cfg=layout)),
        reference=lambda: written(reference.reshape_and_cache(*expected, kv_cache_cfg=layout)),
        device=key_cache.device,
        bytes_moved=2 * len(slots) * heads * (head_k + (head_v or 0)) * dtype.itemsize,
    )


#: A scenario group not built yet: called when the demo reaches it, it makes its inputs and returns
#: its scenarios (more than one when they share inputs); they are freed once run.
Builder = Callable[[], list[Scenario]]


def lazily(make: Callable[..., Scenario], *args: object, **kwargs: object) -> Builder:
    """A builder of the one scenario ``make(*args, **kwargs)``."""
    return lambda: [make(*args, **kwargs)]


def scenarios(scale: int, g: torch.Generator) -> list[Builder]:
    """The demo's calls, each built when it is reached; ``scale`` divides the token counts (1 = realistic
    shapes). All draw from ``g`` in this order, so a run is reproducible."""
    from . import block_demo, quant_demo  # they build on Scenario above

    def n(tokens: int) -> int:
        return max(1, tokens // scale)
    return [
        lazily(kv_cache_scenario, f"kv_cache prefill 4 x {n(512)} tokens, 8x128 heads, float16", [n(512)] * 4, 1024,
               torch.float16, max_seq_len=n(2048), g=g),
        lazily(kv_cache_scenario, "kv_cache decode 64 x 1 token, 4-D new_kv [64, 1, 8, 128], bfloat16", [1] * 64,
               1024, torch.bfloat16, four_d=True, max_seq_len=n(512), g=g),
        lazily(kv_cache_scenario, f"kv_cache uneven batch [{n(300)}, 0, {n(17)}, 1], int8", [n(300), 0, n(17), 1],
               1024, torch.int8, max_seq_len=n(1024), g=g),
        lazily(paged_scenario, f"paged ND 8 x {n(1024)} tokens, block 128, 8x128 heads, float16", [n(1024)] * 8, ND,
               g=g),
        lazily(paged_scenario, f"paged ND cumsum + seq_starts, lens [{n(700)}, 0, {n(260)}], bfloat16",
               [n(700), 0, n(260)], ND, key_dtype=torch.bfloat16, cumsum=True, seq_starts=True, g=g),
        lazily(paged_scenario, f"paged ND MLA (1 head, K 512 + V 64) 4 x {n(1024)} tokens, given outputs",
               [n(1024)] * 4, ND, heads=1, head_k=512, head_v=64, give_outputs=True, g=g),
        lazily(paged_scenario, f"paged NZ 4 x {n(1024)} tokens, block 128, 8x128 heads, float16", [n(1024)] * 4, NZ,
               g=g),
        lazily(paged_scenario, f"paged NZ int8 keys + float16 values, MLA, 4 x {n(512)} tokens", [n(512)] * 4, NZ,
               heads=1, head_k=512, head_v=64, key_dtype=torch.int8, value_dtype=torch.float16, g=g),
        lazily(write_scenario, f"paged write ND prefill 8 x {n(512)} tokens, block 128, 8x128 heads, float16",
               [n(512)] * 8, "nd", g=g),
        lazily(write_scenario,
               "paged write ND decode 64 x 1 token + 8 padding slots, head size 33 (unaligned rows), bfloat16",
               [1] * 64, "nd", head_k=33, head_v=33, dtype=torch.bfloat16, padding=8, g=g),
        lazily(write_scenario, f"paged write NZ 4 x {n(256)} tokens, block 128, 8x128 heads, float16", [n(256)] * 4,
               "nz", g=g),
        lazily(write_scenario, f"paged write key only (MLA latent 576), 4 x {n(256)} tokens, bfloat16",
               [n(256)] * 4, "nd", heads=1, head_k=576, head_v=None, dtype=torch.bfloat16, g=g),
        *quant_demo.scenarios(scale, g),
        *block_demo.scenarios(scale, g),
    ]


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    width = {1: torch.int8, 2: torch.int16}[a.element_size()]
    return a.shape == b.shape and torch.equal(a.view(width), b.view(width))


def _median_seconds(run: Callable[[], tuple[torch.Tensor, ...]], repeats: int
                    ) -> tuple[float, tuple[torch.Tensor, ...], str]:
    """The median time of ``repeats`` calls of ``run`` (at least one), the last call's outputs, and
    where the calls ran (:func:`ascend_kv.tools.runs.where`)."""
    times = []
    before = runs.counts()
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        outputs = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), outputs, runs.where(before, runs.counts())


def _ran_line(decision: policy.Decision, device: torch.device, ran: str) -> tuple[str, bool]:
    """``"<backend>, ran on <place>"``, and whether that place is where the backend runs calls on ``device``
    (an operation the operators do not count, e.g. swap_blocks, is taken at the decision's word)."""
    expected = runs.expected_place(decision.backend, device)
    if expected is None:
        return f"{decision.backend}", True
    if ran == expected:
        return f"{decision.backend}, ran on {ran}", True
    return f"{decision.backend}, but ran on {ran} (explain() said {expected})", False


def _refuse_unusable(backend: str | None) -> None:
    """Raise :class:`ascend_kv.BackendUnavailableError` when the forced ``backend`` cannot run the demo's calls
    (CPU tensors), before any work."""
    if backend is not None:
        decision = policy.explain("KVCacheOperation", torch.device("cpu"), backend)
        if decision.backend is None:
            raise decision.refusal()


def _run(scenario: Scenario, repeats: int) -> bool:
    """Run one scenario, print its rows, and say whether it matched the reference where explain() said."""
    decision = scenario.decision()
    seconds, outputs, ran = _median_seconds(scenario.run, repeats)
    expected = scenario.reference()
    same = all(_same_bits(o, r) for o, r in zip(outputs, expected))
    where, ran_as_said = _ran_line(decision, scenario.device, ran)
    ok = same and ran_as_said
    lines = [(f"{where}: {seconds * 1e3:8.3f} ms, {scenario.bytes_moved / seconds / 1e9:6.2f} GB/s "
              f"read+write; bit-exact vs reference: {'yes' if same else 'NO'}")]
    if scenario.run_into is not None:
        into_seconds, into_outputs, into_ran = _median_seconds(scenario.run_into, repeats)
        into_same = all(_same_bits(o, r) for o, r in zip(into_outputs, expected))
        into_where, into_as_said = _ran_line(decision, scenario.device, into_ran)
        ok = ok and into_same and into_as_said
        lines[0] += " (allocating: the time includes zero-filling the new key and value)"
        lines.append(f"into given key/value, {into_where.removeprefix(f'{decision.backend}, ')}: "
                     f"{into_seconds * 1e3:8.3f} ms, {scenario.bytes_moved / into_seconds / 1e9:6.2f} GB/s "
                     f"read+write; bit-exact vs reference: {'yes' if into_same else 'NO'}")
    print(f"{'ok  ' if ok else 'FAIL'} {scenario.name}", *(f"     {line}" for line in lines),
          f"     why: {decision.reason}", sep="\n", flush=True)
    return ok


def main(argv: list[str] | None = None) -> int:
    """Run every scenario, each built when reached and freed after; print backend, where it ran, reason,
    time and the check; exit 1 on a mismatch. A forced backend that cannot run here raises
    :class:`ascend_kv.BackendUnavailableError` before any work (``ascend-kv demo``: exit 2)."""
    parser = argparse.ArgumentParser(prog="ascend-kv demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shapes 16x smaller (for tests)")
    parser.add_argument("--backend", choices=policy.BACKEND_CHOICES, help="force a backend (default: auto)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per call (median reported)")
    args = parser.parse_args(argv)
    _refuse_unusable(args.backend)
    g = torch.Generator().manual_seed(0)
    failures = 0
    why_no_npu = device.advice()
    if why_no_npu is not None:
        print(f"note: {why_no_npu}\n", flush=True)
    print(f"torch intra-op threads: {torch.get_num_threads()} (the host paths run over them)\n", flush=True)
    with policy.use_backend(args.backend) if args.backend else contextlib.nullcontext():
        for build in scenarios(16 if args.quick else 1, g):
            failures += sum(not _run(scenario, args.repeats) for scenario in build())
    print("all calls match the reference and ran where explain() said" if not failures else
          f"{failures} calls differ from the reference or ran elsewhere than explain() said")
    return 1 if failures else 0
