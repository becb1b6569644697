"""Per-call overhead of the registered operators over the public functions, for decode-sized calls.

Usage: python scripts/op_overhead.py [--calls N]

Times ``torch.ops.ascend_kv.kv_cache`` against ``ascend_kv.kv_cache`` (batch 8, one new token
each, hidden 1024 float16, a 4-layer cache of 512 positions) and
``torch.ops.ascend_kv.paged_cache_load.into`` against ``ascend_kv.paged_cache_load`` (ND, 8
sequences of 64 tokens). Twice: with the public functions replaced by no-ops, which isolates
what the operator layer itself costs (dispatcher, boxing, leaving autograd), and as whole calls.
Then a do-nothing operator registered as in ascend_kv/operators/library.py against a ``custom_op``. Times are
thread CPU time, fastest of interleaved runs, so other processes on a shared machine mostly stay
out of the numbers.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from ascend_kv.api import ops  # importing the package registers torch.ops.ascend_kv


def per_call_us(fns: dict[str, Callable[[], object]], calls: int, repeats: int = 15) -> dict[str, float]:
    """Per function, the fastest of ``repeats`` interleaved runs of ``calls`` calls, in us per call."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.thread_time()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.thread_time() - start) / calls * 1e6)
    return best


@contextmanager
def public_functions_as_no_ops() -> Iterator[None]:
    """Replace ``ascend_kv.api.ops.kv_cache`` / ``paged_cache_load`` (what the operators call) by no-ops."""
    saved = ops.kv_cache, ops.paged_cache_load
    ops.kv_cache = lambda *args, **kwargs: None  # type: ignore[assignment]
    ops.paged_cache_load = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        yield
    finally:
        ops.kv_cache, ops.paged_cache_load = saved


def registration_styles(calls: int) -> dict[str, float]:
    """A do-nothing operator with kv_cache's schema, registered as library.py does and as a custom_op."""
    schema = "(Tensor new_kv, int layer_id, Tensor(a!) past, Tensor token_offset, Tensor seq_len) -> ()"
    lib = torch.library.Library("ascend_kv_overhead_probe", "DEF")
    lib.define("noop" + schema)
    lib.impl("noop", lambda *args: None, "CompositeExplicitAutograd")
    lib.impl("noop", torch.library.fallthrough_kernel, "Autograd")

    @torch.library.custom_op("ascend_kv_overhead_probe::noop_custom_op", mutates_args=("past",))
    def noop_custom_op(
        new_kv: torch.Tensor, layer_id: int, past: torch.Tensor, token_offset: torch.Tensor, seq_len: torch.Tensor
    ) -> None:
        return None

    x, index = torch.zeros(8, 1024), torch.zeros(8, dtype=torch.int32)
    probe = torch.ops.ascend_kv_overhead_probe
    return per_call_us({
        "Library.impl": lambda: probe.noop.default(x, 0, x, index, index),
        "custom_op": lambda: probe.noop_custom_op.default(x, 0, x, index, index),
    }, calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    calls = parser.parse_args().calls
    torch.set_num_threads(1)

    batch, hidden = 8, 1024
    past = torch.zeros(4, batch, 512, hidden, dtype=torch.float16)
    new_kv = torch.randn(batch, hidden).half()
    token_offset = torch.arange(100, 100 + batch, dtype=torch.int32)
    seq_len = torch.ones(batch, dtype=torch.int32)
    cache = torch.randn(64, 16, 8, 128).half()
    table = torch.arange(64, dtype=torch.int32).reshape(batch, 8)
    lens = torch.full((batch,), 64, dtype=torch.int32)
    key, value = torch.empty(batch * 64, 8, 128).half(), torch.empty(batch * 64, 8, 128).half()

    def kv_public() -> object:
        return ops.kv_cache(new_kv, 2, past, token_offset, seq_len)

    def kv_op() -> object:
        return torch.ops.ascend_kv.kv_cache(new_kv, 2, past, token_offset, seq_len)

    def kv_overload() -> object:
        return torch.ops.ascend_kv.kv_cache.default(new_kv, 2, past, token_offset, seq_len)

    def load_public() -> object:
        return ops.paged_cache_load(cache, cache, table, lens, kv_cache_cfg=1, key=key, value=value)

    def load_op() -> object:
        return torch.ops.ascend_kv.paged_cache_load.into(cache, cache, table, lens, kv_cache_cfg=1, key=key, value=value)

    fns = {"kv public": kv_public, "kv torch.ops": kv_op, "kv .default": kv_overload,
           "load public": load_public, "load .into": load_op}
    with public_functions_as_no_ops():
        layer = per_call_us(fns, calls * 10)
    whole = per_call_us(fns, calls)
    print(f"{'us per call':<16}{'operator layer':>16}{'whole call':>12}")
    for name in fns:
        print(f"{name:<16}{layer[name]:>16.1f}{whole[name]:>12.1f}")
    styles = registration_styles(calls * 10)
    print(f"a do-nothing operator: Library.impl {styles['Library.impl']:.1f} us, custom_op {styles['custom_op']:.1f} us")
    print(f"overhead of torch.ops.ascend_kv.kv_cache: {layer['kv torch.ops'] - layer['kv public']:.1f} us "
          f"(.default: {layer['kv .default'] - layer['kv public']:.1f} us); "
          f"of paged_cache_load.into: {layer['load .into'] - layer['load public']:.1f} us")


if __name__ == "__main__":
    main()
