"""The benchmark runs end to end on tiny shapes and writes the promised table, JSON and plot."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import fake_npu
import pytest
import torch
from cases import bits_equal

import ascend_kv
from ascend_kv.backends import npu, sim
from ascend_kv.tools import bench, overhead, reference

ROOT = Path(__file__).resolve().parents[1]
ROW_FIELDS = {
    "workload", "kind", "op", "bulk", "dtype", "backend", "threads", "ran", "bytes_moved", "layers", "median_s",
    "min_s", "gb_per_s", "copy_median_s", "copy_gb_per_s", "ratio_to_copy", "target_ratio_to_copy",
    "goal_ratio_to_copy", "single_median_s", "single_copy_median_s", "single_ratio_to_copy", "reference_median_s",
    "reference_repeats", "speedup_over_reference", "baseline_median_s", "speedup_over_baseline",
    "alternative", "alternative_median_s", "ratio_to_alternative",
}
#: The issue's targets (and goals) as multiples of copy_, with torch's default thread count.
BULK_TARGETS = {"prefill": (0.9, 1.0), "paged-nd": (0.9, 1.0), "paged-nz": (0.9, 1.0), "write-prefill": (0.9, 1.0),
                "block-copy": (0.8, None), "copy-blocks": (0.8, None), "copy-blocks-simultaneous": (0.9, None),
                "swap-bytes": (0.9, None), "gather-blocks": (0.9, 1.0), "scatter-blocks": (0.9, 1.0),
                "state-slots": (None, None), "batch-memcpy": (None, None), "scatter-nd-prefill": (None, None)}
#: The workloads timed beside the callers' own route (issue 31), by kind.
ALTERNATIVES = {"state-slots": "index_select + index_copy_", "batch-memcpy": "a loop of copy_",
                "scatter-nd-decode": "index_copy_", "scatter-nd-prefill": "index_copy_"}


@pytest.fixture
def two_default_threads() -> Iterator[None]:
    """torch's thread count is 2 when the bench starts (its "default"), whatever the machine; put back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_workloads_cover_the_issue() -> None:
    names = [w.name for w in bench.workloads()]
    for kind in ("decode 64x1 h1024", "decode 256x1 h4096", "prefill 8x512 h4096", "prefill 1x4096 h1024",
                 "paged ND 8x2048 8x128", "paged ND 8x2048 MLA 512+64", "paged NZ 8x2048 8x128",
                 "paged NZ 8x2048 MLA 512+64", "write decode 64x1 8x128", "write prefill 8x512 8x128",
                 "copy_state_slots 64 pairs x 48 layers Qwen3-Next TP8", "batch_memcpy 1024 x 16 KiB",
                 "scatter_nd_update prefill 8x512 pairs DSA 512 of 576"):
        assert kind in names
    assert [w.name for w in bench.workloads(tiny=True)] == names


def test_tiny_run_writes_table_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch, two_default_threads: None) -> None:
    from matplotlib.figure import Figure

    plotted: list[tuple[str, list[str]]] = []                     # per figure saved: x scale, bar labels
    save = Figure.savefig

    def spy(figure: Figure, *args: object, **kwargs: object) -> None:
        (ax,) = figure.axes
        plotted.append((ax.get_xscale(), [text.get_text() for text in ax.texts]))
        save(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    status = bench.main(["--tiny", "--warmup", "0", "--repeats", "2", "--reference-repeats", "1",
                         "--sweep-mb", "1", "--json", str(out_json), "--plot", str(out_png)])
    assert status == 0
    table = capsys.readouterr().out
    assert "x copy_" in table and "paged NZ 8x2048 MLA 512+64" in table and "bench --overhead" in table
    assert "threads 2, 1 (torch's default: 2)" in table
    result = json.loads(out_json.read_text())
    assert result["settings"] == {"warmup": 0, "repeats": 2, "threads": [2, 1], "default_threads": 2,
                                  "reference_repeats": 1, "sweep_mb": 1, "backends": ["fallback"], "tiny": True,
                                  "baseline": None, "statistic": "median"}
    assert {"cpu", "logical_cpus", "torch", "intra_op_threads", "parallel_backend", "load_average"} <= \
        result["machine"].keys()
    rows = result["results"]
    # every workload, float16 and int8, with torch's default thread count and then one thread
    assert [(r["workload"], r["dtype"], r["threads"]) for r in rows] == [
        (w.name, dtype, threads) for w in bench.workloads(tiny=True) for dtype in ("float16", "int8")
        for threads in (2, 1)]
    for row in rows:
        assert ROW_FIELDS == row.keys()
        assert row["median_s"] > 0 and row["ratio_to_copy"] > 0 and row["speedup_over_reference"] > 0
        assert row["gb_per_s"] == pytest.approx(row["bytes_moved"] / row["median_s"] / 1e9)
        assert row["ratio_to_copy"] == pytest.approx(row["copy_median_s"] / row["median_s"])
        assert row["single_ratio_to_copy"] == pytest.approx(row["single_copy_median_s"] / row["single_median_s"])
        assert row["speedup_over_reference"] == pytest.approx(row["reference_median_s"] / row["single_median_s"])
        assert 2 <= row["layers"] <= bench.MAX_LAYERS
        assert row["ran"] == ("not counted" if row["op"] == "swap_blocks" else "host paths")  # the operators' count
        assert row["bulk"] == (row["kind"] in BULK_TARGETS)
        # the targets are for torch's default thread count; single-threaded rows are held to the earlier runs
        expected = BULK_TARGETS.get(row["kind"], (None, None)) if row["threads"] == 2 else (None, None)
        assert (row["target_ratio_to_copy"], row["goal_ratio_to_copy"]) == expected
        assert row["baseline_median_s"] is None and row["speedup_over_baseline"] is None
        assert row["alternative"] == ALTERNATIVES.get(row["kind"])
        if row["alternative"] is not None:
            assert row["ratio_to_alternative"] == pytest.approx(row["alternative_median_s"] / row["median_s"])
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (scale, labels), = plotted                # a log axis, so outliers of 100x do not squash the other bars,
    assert scale == "log"                     # and every bar labelled with its ratio
    ratios = [row[k] for row in rows for k in ("ratio_to_copy", "single_ratio_to_copy")]
    assert sorted(labels) == sorted(f"{ratio:.2g}" for ratio in ratios)
    assert torch.get_num_threads() == 2       # the caller's thread count again


def test_default_threads_then_one(tmp_path: Path, capsys: pytest.CaptureFixture[str], two_default_threads: None,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """By default every workload runs with torch's default thread count, then with one; the op and copy_ of
    each row run with the same count (the row's)."""
    seen: list[tuple[str, int]] = []
    copies, kv_cache = bench._copies_of, bench.kv_cache

    def counted_copies(nbytes: int, count: int):
        copy = copies(nbytes, count)
        return lambda: (seen.append(("copy_", torch.get_num_threads())), copy())

    monkeypatch.setattr(bench, "_copies_of", counted_copies)
    monkeypatch.setattr(bench, "kv_cache", lambda *args: (seen.append(("op", torch.get_num_threads())), kv_cache(*args)))
    out_json = tmp_path / "bench.json"
    assert bench.main(["--tiny", "--only", "prefill 8x512 h1024", "--dtypes", "int8", "--repeats", "1",
                       "--warmup", "0", "--reference-repeats", "0", "--json", str(out_json)]) == 0
    assert " x threads 2, 1 (torch's default: 2)," in capsys.readouterr().out
    result = json.loads(out_json.read_text())
    assert (result["settings"]["threads"], result["settings"]["default_threads"]) == ([2, 1], 2)
    assert [(r["threads"], r["target_ratio_to_copy"]) for r in result["results"]] == [(2, 0.9), (1, None)]
    assert {kind for kind, _ in seen} == {"copy_", "op"}
    first_one = next(i for i, (_, threads) in enumerate(seen) if threads == 1)
    assert {threads for _, threads in seen[:first_one]} == {2} and {threads for _, threads in seen[first_one:]} == {1}
    assert torch.get_num_threads() == 2


def test_baseline_puts_an_earlier_run_beside_each_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--baseline: this bench's JSON, or an older one whose rows carry no thread count (its settings' count)."""
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    options = ["--tiny", "--only", "decode 64x1 h1024", "--dtypes", "int8,float16", "--repeats", "1", "--warmup", "0",
               "--reference-repeats", "0", "--threads", "1"]
    assert bench.main([*options, "--json", str(first)]) == 0
    earlier = json.loads(first.read_text())["results"]
    older = tmp_path / "older.json"                                 # as 2971f85 wrote it: no threads in the rows
    older.write_text(json.dumps({"settings": {"threads": 1},
                                 "results": [{k: v for k, v in earlier[0].items() if k != "threads"}]}))
    capsys.readouterr()
    for baseline, matched in ((first, 2), (older, 1)):
        assert bench.main([*options, "--json", str(second), "--baseline", str(baseline)]) == 0
        result = json.loads(second.read_text())
        assert result["settings"]["baseline"] == str(baseline)
        rows = result["results"]
        assert [(r["dtype"], r["speedup_over_baseline"] is not None) for r in rows] == \
            [("int8", True), ("float16", matched == 2)]
        for row, before in zip(rows[:matched], earlier):
            assert row["baseline_median_s"] == before["median_s"]
            assert row["speedup_over_baseline"] == pytest.approx(before["median_s"] / row["median_s"])
        lines = capsys.readouterr().out.splitlines()
        assert lines[1].split()[-4:] == ["x", "base", "x", "alt"]
        int8 = next(line for line in lines if line.startswith("decode 64x1 h1024") and " int8 " in line)
        assert int8.split()[-2:] == [f"{rows[0]['speedup_over_baseline']:.2f}", "-"]  # no alternative route


@pytest.mark.parametrize("backend, place", [("fallback", "host paths"), ("sim", "sim")])
def test_each_row_says_where_the_calls_ran(backend: str, place: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The operators' counts: the fallback's calls on CPU tensors ran on the host paths, the sim's on the sim."""
    out_json = tmp_path / "bench.json"
    assert bench.main(["--tiny", "--only", "write decode", "--dtypes", "float16", "--repeats", "1", "--warmup", "0",
                       "--reference-repeats", "0", "--threads", "1", "--backends", backend,
                       "--json", str(out_json)]) == 0
    (row,) = json.loads(out_json.read_text())["results"]
    assert (row["backend"], row["ran"]) == (backend, place)
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("write decode")]
    assert line.split()[4:7 + len(place.split())] == ["float16", backend, "1", *place.split()]


def test_each_row_is_printed_as_it_is_measured(tmp_path: Path) -> None:
    """Piped, the rows still come one by one, each after the stderr line saying what is measured."""
    script = str(Path(sys.executable).parent / "ascend-kv")
    done = subprocess.run([script, "bench", "--tiny", "--only", "decode 64x1", "--dtypes", "float16,int8",
                           "--warmup", "0", "--repeats", "1", "--reference-repeats", "0", "--sweep-mb", "0",
                           "--threads", "2,1"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, check=True)
    lines = done.stdout.splitlines()
    measured = [(w.name, dtype, threads) for w in bench.workloads(tiny=True) if "decode 64x1" in w.name
                for dtype in ("float16", "int8") for threads in (2, 1)]
    assert len(measured) == 12
    steps = [i for i, line in enumerate(lines) if line.startswith("ascend-kv bench: measuring [")]
    assert len(steps) == len(measured)
    for i, (step, (name, dtype, threads)) in enumerate(zip(steps, measured), 1):
        assert lines[step] == f"ascend-kv bench: measuring [{i}/12] {name}, {dtype}, {threads} thread" \
                              f"{'s' if threads == 2 else ''} ..."
        assert lines[step + 1].split()[:len(name.split()) + 5] == [*name.split(), dtype, "fallback", str(threads),
                                                                   "host", "paths"]
    assert lines[-1] == "the host cost of one small call: ascend-kv bench --overhead"   # measured by its own mode


def test_reference_can_be_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--tiny", "--only", "decode 64x1 h1024", "--dtypes", "int8", "--repeats", "1",
                       "--reference-repeats", "0", "--backends", "fallback", "--threads", "1"]) == 0
    assert "reference 0 rounds" in capsys.readouterr().out


def test_unavailable_backend_is_reported_not_fatal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "bench.json"
    assert bench.main(["--tiny", "--only", "paged ND 8x2048 8x128", "--dtypes", "float16", "--repeats", "1",
                       "--reference-repeats", "0", "--backends", "fallback,npu", "--threads", "1",
                       "--json", str(out_json)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if " npu " in line]
    assert line.split()[4:8] == ["float16", "npu", "1", "unavailable:"]         # CPU tensors: no NPU here
    assert "backend 'npu' cannot run PagedCacheLoadOperation on cpu" in line
    rows = json.loads(out_json.read_text())["results"]
    assert [(r["backend"], "unavailable" in r) for r in rows] == [("npu", True), ("fallback", False)]


@pytest.mark.parametrize("argv, message", [
    (["--repeats", "0"], "--repeats"),
    (["--threads", "0"], "--threads takes a comma-separated list of 'default' and counts >= 1, got '0'"),
    (["--threads", "default,x"], "--threads takes"),
    (["--dtypes", "float32"], "--dtypes takes"),
    (["--backends", "fallback,gpu"], "--backends takes"),
    (["--sweep-mb", "-1"], "--sweep-mb"),
])
def test_bad_arguments_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(argv) == 2
    assert message in capsys.readouterr().err


def test_plot_without_matplotlib_exits_2_before_measuring(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)             # import matplotlib fails, as when not installed
    measured: list[object] = []
    monkeypatch.setattr(bench, "measure", lambda *args, **kwargs: measured.append(args))
    assert bench.main(["--tiny", "--plot", str(tmp_path / "bench.png")]) == 2
    captured = capsys.readouterr()
    assert "--plot needs matplotlib: pip install 'ascend_kv[bench]'" in captured.err
    assert measured == [] and "measuring" not in captured.err and not (tmp_path / "bench.png").exists()


def test_script_wrapper_shows_help() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py"), "--help"],
                          capture_output=True, text=True, check=True)
    assert "--threads" in done.stdout and "--plot" in done.stdout


def test_every_timed_call_follows_a_sweep() -> None:
    """The sweep runs right before each timed call (not before the untimed warm-up)."""
    events: list[str] = []
    fns = {"a": lambda: events.append("a"), "b": lambda: events.append("b")}
    times = bench.interleaved(fns, warmup=1, repeats={"a": 2, "b": 1}, sweep=lambda: events.append("sweep"))
    assert events == ["a", "b", "sweep", "a", "sweep", "b", "sweep", "a"]
    assert [len(times["a"]), len(times["b"])] == [2, 1]


@pytest.mark.parametrize("name", ["prefill 8x512 h1024", "decode 64x1 h1024", "paged ND 8x2048 8x128",
                                  "paged NZ 8x2048 MLA 512+64"])
def test_loop_calls_each_layer_once_on_its_own_tensors(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop makes one public call per layer, in layer order, each on tensors no other layer uses."""
    seen: list[tuple[int, ...]] = []
    monkeypatch.setattr(bench, "kv_cache", lambda new_kv, layer, past, *_: seen.append((layer, new_kv.data_ptr())))
    monkeypatch.setattr(bench, "paged_cache_load", lambda k, v, *_, key, value, **__: seen.append(
        tuple(t.data_ptr() for t in (k, v, key, value))))
    w = next(w for w in bench.workloads(tiny=True) if w.name == name)
    call = bench.build(w, torch.float16)
    call.loop()
    assert len(seen) == call.layers >= 2
    if w.op == "kv_cache":
        assert [layer for layer, _ in seen] == list(range(call.layers))
    addresses = [ptr for call_tensors in seen for ptr in (call_tensors[1:] if w.op == "kv_cache" else call_tensors)]
    assert len(set(addresses)) == len(addresses)
    seen.clear()
    call.single()
    assert len(seen) == 1


@pytest.mark.parametrize("bytes_moved, layer_bytes, layers", [
    (8 << 20, 12 << 20, 8),            # a 4 MB prefill write: 8 calls move 64 MB
    (128 << 10, 8 << 20, 32),          # a decode step: at most 32 layers
    (4 << 20, 128 << 20, 8),           # a decode step with a large cache: within 1 GB
    (128 << 20, 192 << 20, 2),         # at least 2 layers, so every call but the first runs warm code
])
def test_layers_for(bytes_moved: int, layer_bytes: int, layers: int) -> None:
    assert bench.layers_for(bytes_moved, layer_bytes) == layers


# ----------------------------------------------------------------------------- bench --overhead

OVERHEAD_ROW_FIELDS = {
    "set", "call", "device", "warm_us", "warm_median_us", "swept_us", "swept_median_us", "x_index_copy",
    "swept_x_index_copy", "x_cpu", "swept_x_cpu", "target", "goal", "ran", "transfers", "uploads", "launches_per_call",
    "unavailable", "samples",
}
#: Per set of ``bench --overhead``, the calls it times on each device.
OVERHEAD_CALLS = {
    "kv_cache 8x1 1x16": ["bare index_copy_", "do-nothing operator", "ascend_kv.kv_cache",
                          "torch.ops.ascend_kv.kv_cache.default"],
    "reshape_and_cache ND 8 tokens 1x16": ["bare index_copy_", "ascend_kv.reshape_and_cache",
                                           "torch.ops.ascend_kv.reshape_and_cache.default"],
    "paged_cache_load into ND 8x3 1x16": ["bare index_copy_", "ascend_kv.paged_cache_load(key=, value=)",
                                          "torch.ops.ascend_kv.paged_cache_load.into"],
    "block_copy 3 blocks 16x1x16": ["bare index_copy_", "ascend_kv.block_copy", "torch.ops.ascend_kv.block_copy.default",
                                    "ascend_kv.copy_blocks", "torch.ops.ascend_kv.copy_blocks.default"],
    "decode kv_cache 64x1 h1024": ["bare index_copy_", "ascend_kv.kv_cache", "torch.ops.ascend_kv.kv_cache.default"],
}
TARGETS = {"ascend_kv.kv_cache": (6.0, 2.0), "torch.ops.ascend_kv.kv_cache.default": (6.0, 2.0),
           "ascend_kv.reshape_and_cache": (6.0, 2.0), "torch.ops.ascend_kv.reshape_and_cache.default": (6.0, 2.0),
           "ascend_kv.paged_cache_load(key=, value=)": (8.0, 3.0),
           "torch.ops.ascend_kv.paged_cache_load.into": (8.0, 3.0)}


@pytest.fixture
def npu_kernel_library(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The fake NPU with the kernels' host build as its kernel library, on a part where the kernels run."""
    fake_npu.install()
    monkeypatch.setenv(npu.LIBRARY_ENV, str(sim.library_path()))
    monkeypatch.setenv("ASCEND_KV_SOC", "Ascend910B3")
    npu.library.cache_clear()
    yield
    npu.library.cache_clear()


def test_overhead_tiny_run_times_every_call_on_cpu_and_fake_npu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], npu_kernel_library: None) -> None:
    out_json = tmp_path / "overhead.json"
    assert bench.main(["--overhead", "--tiny", "--json", str(out_json)]) == 0
    table = capsys.readouterr().out
    assert "fake NPU: index tensors on the device, the kernels' route, kernel launches doing nothing" in table
    assert all(name in table for name in OVERHEAD_CALLS) and "<= 6 (2)" in table and "<= 1.15 (1)" in table
    result = json.loads(out_json.read_text())
    assert result["settings"] == {"rounds": 2, "calls": 2, "swept_rounds": 2, "sweep_mb": 1, "threads": 1,
                                  "tiny": True, "clock": "time.thread_time", "statistic": "min"}
    assert result["fake_npu"] == {"measured": True, "reason": None}
    assert {"cpu", "logical_cpus", "torch", "load_average"} <= result["machine"].keys()
    rows = result["rows"]
    assert [(r["set"], r["call"], r["device"]) for r in rows] == [
        (name, call, device) for name, calls in OVERHEAD_CALLS.items() for device in ("cpu", "npu") for call in calls]
    for row in rows:
        assert set(row) == OVERHEAD_ROW_FIELDS and row["unavailable"] is None
        bare = next(r for r in rows if r["set"] == row["set"] and r["call"] == "bare index_copy_" and r["device"] == "cpu")
        assert 0 < row["warm_us"] <= row["warm_median_us"] and 0 < row["swept_us"] <= row["swept_median_us"]
        assert row["x_index_copy"] == pytest.approx(row["warm_us"] / bare["warm_us"])
        assert row["swept_x_index_copy"] == pytest.approx(row["swept_us"] / bare["swept_us"])
        assert len(row["samples"]["warm_s"]) == 2 and len(row["samples"]["swept_s"]) == 2
        decode = row["set"].startswith("decode") and row["call"] in TARGETS
        assert (row["target"], row["goal"]) == ((1.15, 1.0) if decode else TARGETS.get(row["call"], (None, None)))
        # where the operators counted the trial call: CPU calls on the host paths, fake NPU calls on the kernels
        # (never the device fallback); the yardsticks are no operator of ours
        yardstick = row["call"] in ("bare index_copy_", "do-nothing operator")
        assert row["ran"] == (None if yardstick else {"cpu": "host paths", "npu": "kernels"}[row["device"]])
        if row["device"] == "cpu":
            assert row["x_cpu"] is None and row["launches_per_call"] is None
            continue
        cpu = next(r for r in rows if (r["set"], r["call"], r["device"]) == (row["set"], row["call"], "cpu"))
        assert row["x_cpu"] == pytest.approx(row["warm_us"] / cpu["warm_us"])
        assert row["swept_x_cpu"] == pytest.approx(row["swept_us"] / cpu["swept_us"])
        # device index tensors: nothing read back, nothing uploaded; each public call is one (do-nothing) launch
        assert (row["transfers"], row["uploads"]) == (0, 0)
        assert row["launches_per_call"] == (0 if row["call"] in ("bare index_copy_", "do-nothing operator") else 1)


def test_overhead_leaves_the_kernels_in_place(capsys: pytest.CaptureFixture[str], npu_kernel_library: None) -> None:
    """After the bench the kernel library's own kernels run again: a call launches one and writes the bytes."""
    assert bench.main(["--overhead", "--tiny", "--sweep-mb", "0"]) == 0
    capsys.readouterr()
    assert npu.library().loaded and npu.library().path == str(sim.library_path())   # $ASCEND_KV_NPU_LIB's again
    g = torch.Generator().manual_seed(3)
    past = torch.randn(2, 4, 8, 16, generator=g).half()
    new_kv = torch.randn(4, 16, generator=g).half()
    offset, seq_len = torch.tensor([1, 8, 3, 5], dtype=torch.int32), torch.ones(4, dtype=torch.int32)
    expected = reference.kv_cache(new_kv, 1, past.clone(), offset, seq_len)
    on_npu = [t.to("npu") for t in (new_kv, past, offset, seq_len)]
    launches = int(torch.ops.ascend_kv_host.launches())
    ascend_kv.kv_cache(on_npu[0], 1, *on_npu[1:])
    assert int(torch.ops.ascend_kv_host.launches()) == launches + 1
    assert bits_equal(on_npu[1].cpu(), expected)


def test_overhead_without_the_fake_npu_says_so_and_measures_the_cpu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """As in an installed package, where tests/fake_npu does not exist."""
    monkeypatch.delitem(sys.modules, "fake_npu", raising=False)
    missing = tmp_path / "fake_npu" / "__init__.py"
    out_json = tmp_path / "overhead.json"
    assert bench.main(["--overhead", "--tiny", "--fake-npu", str(missing), "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("fake NPU:")]
    assert line == (f"fake NPU: not measured (FileNotFoundError: {missing} does not exist: the fake NPU is in a "
                    "source checkout only); the CPU only")
    result = json.loads(out_json.read_text())
    assert not result["fake_npu"]["measured"] and {r["device"] for r in result["rows"]} == {"cpu"}


def test_overhead_reports_a_call_an_older_package_lacks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Measuring an older tree: a public function it does not have is a row saying so; the rest is measured."""
    monkeypatch.delattr(ascend_kv, "copy_blocks")
    out_json = tmp_path / "overhead.json"
    assert bench.main(["--overhead", "--tiny", "--no-npu", "--sweep-mb", "0", "--json", str(out_json)]) == 0
    assert "ascend_kv.copy_blocks                          cpu    -          unavailable: AttributeError:" in \
        capsys.readouterr().out
    rows = json.loads(out_json.read_text())["rows"]
    assert [r["call"] for r in rows if r["unavailable"]] == ["ascend_kv.copy_blocks"]
    assert all(r["warm_us"] > 0 and r["swept_us"] is None for r in rows if not r["unavailable"])


def test_overhead_compare_puts_two_runs_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    runs = []
    for name in ("old-1", "old-2", "new-1"):
        runs.append(tmp_path / f"{name}.json")
        assert bench.main(["--overhead", "--tiny", "--no-npu", "--sweep-mb", "0", "--json", str(runs[-1])]) == 0
    capsys.readouterr()
    old = [json.loads(run.read_text())["rows"] for run in runs[:2]]
    new = json.loads(runs[2].read_text())["rows"]
    new[-1]["unavailable"] = "AttributeError: gone"
    runs[2].write_text(json.dumps({"rows": new}))
    assert bench.main(["--overhead", "--compare", f"{runs[0]},{runs[1]}", str(runs[2]), "--names", "abc1234,tip"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("fastest of 2 run(s) of abc1234 and 1 of tip")
    assert lines[1].split()[:6] == ["call", "device", "abc1234", "us", "tip", "us"]
    by_call: dict[tuple[str, str], str] = {}                         # (set, call) -> its line
    for line in lines[3:]:
        if not line.startswith(" "):
            current = line
        else:
            by_call[current, line[2:48].strip()] = line
    assert len(by_call) == len(new)
    for i, row in enumerate(new[:-1]):
        fastest = min(rows[i]["warm_us"] for rows in old)
        columns = by_call[row["set"], row["call"]].split()[-8:-5]
        assert columns == [f"{fastest:.1f}", f"{row['warm_us']:.1f}", f"{row['warm_us'] / fastest:.2f}"]
    assert by_call[new[-1]["set"], new[-1]["call"]].split()[-3:] == ["tip:", "AttributeError:", "gone"]


def test_overhead_silences_an_older_kernel_librarys_operators() -> None:
    """An older tree's kernel library registered torch.ops operators: while its NPU rows are timed, their
    NPU kernels are one C++ kernel that counts its calls and does nothing; afterwards the own kernels run."""
    fake_npu.install()
    overhead.do_nothing_kernels()
    kernels = torch.ops.ascend_kv_overhead_kernels
    lib = torch.library.Library("ascend_kv_test_older_kernels", "DEF")
    try:
        lib.define("kv_cache(Tensor(a!) past, int value) -> ()")

        def own_kernel(past: torch.Tensor, value: int) -> None:
            past.fill_(value)

        lib.impl("kv_cache", own_kernel, "PrivateUse1")
        old = torch.ops.ascend_kv_test_older_kernels.kv_cache
        past = torch.zeros(4).to("npu")
        kernels.silence("ascend_kv_test_older_kernels", ["kv_cache"])
        try:
            launches = int(kernels.launches())
            old(past, 7)
            assert int(kernels.launches()) == launches + 1 and past.cpu().tolist() == [0.0] * 4
        finally:
            kernels.restore()
        old(past, 7)
        assert int(kernels.launches()) == launches + 1 and past.cpu().tolist() == [7.0] * 4
    finally:
        lib._destroy()


@pytest.mark.slow  # a new virtual environment and an editable install of another tree
def test_overhead_against_a_revision_runs_both_trees(tmp_path: Path) -> None:
    done = subprocess.run([str(ROOT / "scripts" / "overhead_against.sh"), "HEAD", "--passes", "1", "--tiny",
                           "--no-npu", "--sweep-mb", "0", "--out", str(tmp_path)],
                          capture_output=True, text=True, check=True, cwd=tmp_path)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    runs = {path.name: json.loads(path.read_text()) for path in tmp_path.glob("*.json")}
    assert sorted(runs) == ["new-1.json", "old-1.json"]
    assert runs["new-1.json"]["ascend_kv"]["path"] == str(ROOT / "ascend_kv")
    assert runs["old-1.json"]["ascend_kv"]["path"] != str(ROOT / "ascend_kv")
    assert f"== {head} against this tree" in done.stdout
    assert "ascend_kv.paged_cache_load(key=, value=)" in done.stdout.split(f"== {head} against this tree")[1]


def test_quant_bench_runs_its_three_rows(capsys: pytest.CaptureFixture[str]) -> None:
    """``ascend-kv bench --quant --tiny``: the write rows against the two-op composition, the load against copy_."""
    assert bench.main(["--quant", "--tiny", "--warmup", "0", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("(target <= 0.6x)") == 2 and out.count("(target >= 0.8x)") == 1


def test_transfer_bench_runs_its_rows(capsys: pytest.CaptureFixture[str]) -> None:
    """``ascend-kv bench --transfer --tiny``: a pull between two processes, against Mooncake alone and unmerged."""
    assert bench.main(["--transfer", "--tiny", "--warmup", "0", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("(target >= 0.9x)") == 2 and "registered regions, 64 layers with K/V and scale caches: 1" in out
