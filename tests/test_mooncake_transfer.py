"""Prefill-to-decode KV transfer between two real processes on Mooncake's TransferEngine over TCP on
loopback (docs/semantics.md §17.3): a prefill process (tests/transfer_peer.py) writes every block
with reshape_and_cache and serves its caches; this process is the decode side, pulls a request's
blocks into its own caches (same layout, TP 1 -> 2, ND -> NZ, int8 with scale caches, many small
requests), reads them back (paged_cache_load, or each layout's plain permutation) and compares
byte for byte with the prefill's bytes. Every wait is bounded: a peer that does not answer fails
the test within seconds.
"""

from __future__ import annotations

import json
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import fake_npu
import pytest
import torch
import transfer_peer as peer

import ascend_kv
from ascend_kv.transfer import CacheDescriptor, TransferAgent, TransferError, allocate_transfer_caches

PEER = Path(__file__).with_name("transfer_peer.py")
#: Seconds the prefill process may take to start (import torch, build nothing: the library is cached).
START_TIMEOUT = 120.0


class Prefill:
    """A running prefill process and its descriptors."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, str(PEER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        self.descriptors = {case: CacheDescriptor.from_json(text) for case, text in json.loads(self._line()).items()}

    def _line(self) -> str:
        """The prefill's line of descriptors (after whatever else it prints), within START_TIMEOUT."""
        deadline = time.monotonic() + START_TIMEOUT
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
            while selector.select(max(deadline - time.monotonic(), 0)):
                line = self.process.stdout.readline()  # type: ignore[union-attr]
                if not line:
                    raise RuntimeError(f"the prefill process exited ({self.process.wait(10)}) before its descriptors")
                if line.startswith(peer.READY):
                    return line[len(peer.READY):]
        self.stop()
        raise TimeoutError(f"the prefill process printed no descriptors within {START_TIMEOUT} s")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)


@pytest.fixture(scope="module")
def prefill() -> Iterator[Prefill]:
    process = Prefill()
    yield process
    process.process.stdin.close()  # type: ignore[union-attr]
    try:
        process.process.wait(10)
    except subprocess.TimeoutExpired:
        process.stop()


def decode_agent(case: str, *, layout: str | None = None, tp_rank: int = 0, tp_size: int = 1,
                 timeout: float = 10.0) -> TransferAgent:
    """A decode side's agent over empty caches of ``case``'s model, in ``layout``, TP rank of size."""
    default_layout, dtype, scale_dtype = peer.CASES[case]
    caches = allocate_transfer_caches(peer.LAYERS, peer.BLOCKS, peer.BLOCK_SIZE, peer.HEADS // tp_size, peer.HEAD_SIZE,
                                      dtype, layout=layout or default_layout, scale_dtype=scale_dtype,
                                      tp_rank=tp_rank, tp_size=tp_size)
    caches.buffer.zero_()
    return TransferAgent(caches, timeout=timeout)


def assert_blocks_equal(agent: TransferAgent, case: str, remote_ids: list[int], local_ids: list[int]) -> None:
    """Blocks ``local_ids`` here hold this side's heads of the prefill's blocks ``remote_ids``, bit for bit."""
    expected = peer.prefill_caches(case)  # the prefill's bytes, rebuilt from its seed
    d, e = agent.caches.descriptor, expected.descriptor
    heads = slice(d.head_start * d.head_size, (d.head_start + d.num_heads) * d.head_size)
    for name in [s.name for s in d.segments]:
        for layer in range(d.num_layers):
            got, want = agent.caches.caches(name)[layer], expected.caches(name)[layer]
            if name.endswith("_scale"):
                want = want[torch.tensor(remote_ids)][:, :, d.head_start:d.head_start + d.num_heads]
                assert torch.equal(got[torch.tensor(local_ids)].view(torch.int32), want.view(torch.int32))
                continue
            want_rows = peer.blocks_nd(want, e.layout, torch.tensor(remote_ids))[:, :, heads]
            got_rows = peer.blocks_nd(got, d.layout, torch.tensor(local_ids))
            assert torch.equal(got_rows.view(torch.int8), want_rows.view(torch.int8)), (name, layer)


def test_pull_same_layout_lands_in_place_and_reads_back_with_paged_cache_load(prefill: Prefill) -> None:
    agent = decode_agent("nd")
    remote, local = [3, 4, 5, 9], [10, 11, 12, 0]
    agent.pull(prefill.descriptors["nd"], torch.tensor(remote), torch.tensor(local))
    assert agent._staging is None  # the same geometry: straight into the caches
    assert_blocks_equal(agent, "nd", remote, local)
    expected = peer.prefill_caches("nd")
    tokens = torch.tensor([len(local) * peer.BLOCK_SIZE - 5], dtype=torch.int32)
    for layer in range(peer.LAYERS):
        got = ascend_kv.paged_cache_load(agent.caches.key_caches[layer], agent.caches.value_caches[layer],
                                         torch.tensor([local], dtype=torch.int32), tokens, kv_cache_cfg="nd")
        want = ascend_kv.paged_cache_load(expected.key_caches[layer], expected.value_caches[layer],
                                          torch.tensor([remote], dtype=torch.int32), tokens, kv_cache_cfg="nd")
        assert all(torch.equal(g.view(torch.int16), w.view(torch.int16)) for g, w in zip(got, want))
    untouched = [b for b in range(peer.BLOCKS) if b not in local]
    assert not agent.caches.key_caches[0][untouched].any()
    agent.close()


@pytest.mark.parametrize("case", ["nd", "hnd", "q8"])
def test_pull_tp1_to_tp2_splits_heads(prefill: Prefill, case: str) -> None:
    """Each decode rank of TP 2 pulls the prefill's (TP 1) blocks and keeps its half of the heads."""
    for rank in range(2):
        agent = decode_agent(case, tp_rank=rank, tp_size=2)
        agent.pull(prefill.descriptors[case], torch.tensor([7, 8, 2]), torch.tensor([1, 2, 30]))
        assert_blocks_equal(agent, case, [7, 8, 2], [1, 2, 30])
        agent.close()


@pytest.mark.parametrize("case", ["nd", "hnd"])
def test_pull_relays_out_to_nz(prefill: Prefill, case: str) -> None:
    agent = decode_agent(case, layout="nz")
    agent.pull(prefill.descriptors[case], torch.tensor([0, 31, 16]), torch.tensor([5, 6, 7]))
    assert_blocks_equal(agent, case, [0, 31, 16], [5, 6, 7])
    tokens = torch.tensor([3 * peer.BLOCK_SIZE], dtype=torch.int32)
    expected = peer.prefill_caches(case)
    got, _ = ascend_kv.paged_cache_load(agent.caches.key_caches[1], agent.caches.value_caches[1],
                                        torch.tensor([[5, 6, 7]], dtype=torch.int32), tokens, kv_cache_cfg="nz")
    want = peer.blocks_nd(expected.key_caches[1], case, torch.tensor([0, 31, 16]))
    assert torch.equal(got.reshape(-1).view(torch.int16), want.reshape(-1).view(torch.int16))
    agent.close()


def test_pull_quantized_caches_with_their_scale_caches(prefill: Prefill) -> None:
    agent = decode_agent("q8")
    agent.pull(prefill.descriptors["q8"], torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]))
    assert_blocks_equal(agent, "q8", [1, 2, 3], [4, 5, 6])
    agent.close()


def test_many_small_requests_register_once(prefill: Prefill) -> None:
    agent = decode_agent("nd")
    regions = agent.regions
    pairs = [(r, (r * 7) % peer.BLOCKS) for r in range(peer.BLOCKS)]
    for remote, local in pairs:
        agent.pull(prefill.descriptors["nd"], torch.tensor([remote]), torch.tensor([local]))
    assert agent.regions == regions == 1
    remote, local = zip(*pairs)
    assert_blocks_equal(agent, "nd", list(remote), list(local))
    agent.close()


def test_a_request_of_more_ranges_than_a_batch_goes_in_batches(prefill: Prefill,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Every other block: one range per (layer, K/V, block), 6 x 5 = 30 ranges in batches of 7."""
    monkeypatch.setattr(ascend_kv.transfer.agent, "MAX_BATCH", 7)
    agent = decode_agent("nd")
    remote, local = [1, 3, 5, 7, 9], [20, 22, 24, 26, 28]
    agent.pull(prefill.descriptors["nd"], torch.tensor(remote), torch.tensor(local))
    assert_blocks_equal(agent, "nd", remote, local)
    agent.close()


def test_push_writes_the_peers_blocks(prefill: Prefill) -> None:
    """Decode-to-prefill is the same call the other way: pushed bytes pulled back are the pushed ones
    (into prefill blocks 28-29, which no other test reads)."""
    agent = decode_agent("nd")
    agent.caches.key_caches[2][3].fill_(1.5)
    agent.caches.value_caches[0][4].fill_(-2.0)
    agent.push(prefill.descriptors["nd"], torch.tensor([3, 4]), torch.tensor([28, 29]))
    back = decode_agent("nd")
    back.pull(prefill.descriptors["nd"], torch.tensor([28, 29]), torch.tensor([0, 1]))
    for name in ("key", "value"):
        for layer in range(peer.LAYERS):
            assert torch.equal(back.caches.caches(name)[layer][:2], agent.caches.caches(name)[layer][3:5])
    agent.close()
    back.close()


def test_bad_descriptor_and_ids_raise_before_any_byte_moves(prefill: Prefill) -> None:
    agent = decode_agent("nd")
    remote = prefill.descriptors["nd"]
    with pytest.raises(ValueError, match=r"src_block_ids\[1\] = 32 is out of range: the src side holds 32 blocks"):
        agent.pull(remote, torch.tensor([31, 32]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"dst_block_ids\[1\] = 0 repeats dst_block_ids\[0\]"):
        agent.pull(remote, torch.tensor([1, 2]), torch.tensor([0, 0]))
    other = decode_agent("nd", tp_rank=0, tp_size=2).descriptor
    with pytest.raises(ValueError, match=r"dst.num_heads = 2 differs from src.num_heads = 4"):
        agent.push(other, torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(ValueError, match=r"descriptor.num_blocks must be a non-negative int"):
        CacheDescriptor.from_json(remote.to_json().replace('"num_blocks": 32', '"num_blocks": -1'))
    with pytest.raises(ValueError, match="descriptor is not JSON"):
        CacheDescriptor.from_json(remote.to_json()[:-3])
    assert not agent.caches.buffer.any()
    agent.close()


def test_a_killed_peer_is_an_error_within_the_timeout() -> None:
    victim = Prefill()
    descriptor = victim.descriptors["nd"]
    victim.stop()
    agent = decode_agent("nd", timeout=5.0)
    start = time.monotonic()
    with pytest.raises(TransferError):
        agent.pull(descriptor, torch.tensor([0, 1]), torch.tensor([0, 1]))
    assert time.monotonic() - start < 5.0 + 5.0
    agent.close()


def test_a_hung_peer_is_an_error_within_the_timeout() -> None:
    """A peer stopped mid-serving (SIGSTOP: its sockets accept, nothing answers) fails the pull in time;
    the staged case leaves the caches as they were."""
    victim = Prefill()
    agent = decode_agent("nd", layout="nz")
    agent.pull(victim.descriptors["nd"], torch.tensor([0]), torch.tensor([0]))  # connected, then stopped
    agent.timeout = 3.0
    before = agent.caches.buffer.clone()
    victim.process.send_signal(signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(TransferError, match="did not finish within 3.0 s"):
            agent.pull(victim.descriptors["nd"], torch.tensor([1, 2]), torch.tensor([1, 2]))
        assert time.monotonic() - start < 3.0 + 5.0  # the timeout, and a loaded machine's slack
        assert torch.equal(agent.caches.buffer, before)
    finally:
        victim.stop()  # the engine's blocked call then returns
    agent.close()


def test_import_ascend_kv_needs_no_mooncake_and_its_absence_says_how_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    done = subprocess.run([sys.executable, "-c", "import sys, ascend_kv; print('mooncake' in sys.modules)"],
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False"
    monkeypatch.setitem(sys.modules, "mooncake.engine", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install ascend_kv\[mooncake\].*libibverbs1"):
        decode_agent("nd")


@pytest.mark.filterwarnings("ignore::ascend_kv.FallbackWarning")  # no kernel library here: the device fallback
def test_pull_into_npu_caches_relays_out_on_the_device(prefill: Prefill) -> None:
    """Decode caches in (fake) NPU memory: the staging buffer is on the device too, and the one
    scatter_blocks per segment runs there; the bytes are the prefill's."""
    fake_npu.install()
    caches = allocate_transfer_caches(peer.LAYERS, peer.BLOCKS, peer.BLOCK_SIZE, peer.HEADS, peer.HEAD_SIZE,
                                      layout="nz", device="npu:0")
    assert caches.descriptor.device == "npu:0" and caches.key_caches[0].device.type == "npu"
    caches.buffer.zero_()
    agent = TransferAgent(caches, timeout=10.0)
    agent.pull(prefill.descriptors["nd"], torch.tensor([4, 5]), torch.tensor([9, 3]))
    assert agent._staging is not None and agent._staging.buffer.device.type == "npu"
    expected = peer.prefill_caches("nd")
    for name in ("key", "value"):
        for layer in range(peer.LAYERS):
            got = peer.blocks_nd(caches.caches(name)[layer].cpu(), "nz", torch.tensor([9, 3]))
            want = peer.blocks_nd(expected.caches(name)[layer], "nd", torch.tensor([4, 5]))
            assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    agent.close()
