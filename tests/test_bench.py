"""The benchmark runs end to end on tiny shapes and writes the promised table, JSON and plot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ascend_kv.tools import bench

ROOT = Path(__file__).resolve().parents[1]
ROW_FIELDS = {
    "workload", "kind", "op", "dtype", "backend", "path", "bytes_moved", "layers", "median_s", "min_s", "gb_per_s",
    "copy_median_s", "copy_gb_per_s", "ratio_to_copy", "target_ratio_to_copy", "single_median_s",
    "single_copy_median_s", "single_ratio_to_copy", "reference_median_s", "reference_repeats", "speedup_over_reference",
}


def test_workloads_cover_the_issue() -> None:
    names = [w.name for w in bench.workloads()]
    for kind in ("decode 64x1 h1024", "decode 256x1 h4096", "prefill 8x512 h4096", "prefill 1x4096 h1024",
                 "paged ND 8x2048 8x128", "paged ND 8x2048 MLA 512+64", "paged NZ 8x2048 8x128",
                 "paged NZ 8x2048 MLA 512+64", "write decode 64x1 8x128", "write prefill 8x512 8x128"):
        assert kind in names
    assert [w.name for w in bench.workloads(tiny=True)] == names


def test_tiny_run_writes_table_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    plotted: list[tuple[str, list[str]]] = []                     # per figure saved: x scale, bar labels
    save = Figure.savefig

    def spy(figure: Figure, *args: object, **kwargs: object) -> None:
        (ax,) = figure.axes
        plotted.append((ax.get_xscale(), [text.get_text() for text in ax.texts]))
        save(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    status = bench.main(["--tiny", "--warmup", "0", "--repeats", "2", "--threads", "1", "--reference-repeats", "1",
                         "--sweep-mb", "1", "--json", str(out_json), "--plot", str(out_png)])
    assert status == 0
    table = capsys.readouterr().out
    assert "x copy_" in table and "paged NZ 8x2048 MLA 512+64" in table and "bare index_copy_" in table
    result = json.loads(out_json.read_text())
    assert result["settings"] == {"warmup": 0, "repeats": 2, "threads": 1, "reference_repeats": 1, "sweep_mb": 1,
                                  "backends": ["fallback"], "tiny": True, "statistic": "median"}
    assert {"cpu", "logical_cpus", "torch", "native_copier", "load_average"} <= result["machine"].keys()
    rows = result["results"]
    assert len(rows) == len(bench.workloads()) * 2                             # every workload, float16 and int8
    for row in rows:
        assert ROW_FIELDS <= row.keys()
        assert row["median_s"] > 0 and row["ratio_to_copy"] > 0 and row["speedup_over_reference"] > 0
        assert row["gb_per_s"] == pytest.approx(row["bytes_moved"] / row["median_s"] / 1e9)
        assert row["ratio_to_copy"] == pytest.approx(row["copy_median_s"] / row["median_s"])
        assert row["single_ratio_to_copy"] == pytest.approx(row["single_copy_median_s"] / row["single_median_s"])
        assert row["speedup_over_reference"] == pytest.approx(row["reference_median_s"] / row["single_median_s"])
        assert 2 <= row["layers"] <= bench.MAX_LAYERS
        assert set(row["path"].split("/")) <= {"native", "slices", "rows", "scatter", "gather", "general"}
        assert row["prevalidated_median_s"] > 0
        assert row["prevalidated_ratio_to_copy"] == pytest.approx(
            row["single_copy_median_s"] / row["prevalidated_median_s"])
    overhead = result["decode_overhead"]
    assert set(overhead["per_call_s"]) == {"public kv_cache", "checks only", "bare index_copy_",
                                           "public reshape_and_cache", "bare index_copy_ x2"}
    assert overhead["ratio_to_index_copy"] > 0 and overhead["write_ratio_to_index_copy"] > 0
    assert set(overhead["cold_per_call_s"]) == set(overhead["per_call_s"]) and overhead["cold_ratio_to_index_copy"] > 0
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (scale, labels), = plotted                # a log axis, so outliers of 100x do not squash the other bars,
    assert scale == "log"                     # and every bar labelled with its ratio
    ratios = [row[k] for row in rows for k in ("ratio_to_copy", "single_ratio_to_copy", "prevalidated_ratio_to_copy")]
    assert sorted(labels) == sorted(f"{ratio:.2g}" for ratio in ratios)


def test_one_thread_by_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As docs/benchmarks.md measures: on a shared machine more threads wait for busy CPUs."""
    out_json = tmp_path / "bench.json"
    torch.set_num_threads(2)
    try:
        assert bench.main(["--tiny", "--only", "decode 64x1 h1024", "--dtypes", "int8", "--repeats", "1",
                           "--reference-repeats", "0", "--json", str(out_json)]) == 0
    finally:
        torch.set_num_threads(1)
    assert ", threads 1," in capsys.readouterr().out
    assert json.loads(out_json.read_text())["settings"]["threads"] == 1


def test_each_row_is_printed_as_it_is_measured(tmp_path: Path) -> None:
    """Piped, the rows still come one by one, each after the stderr line saying what is measured."""
    script = str(Path(sys.executable).parent / "ascend-kv")
    done = subprocess.run([script, "bench", "--tiny", "--only", "decode 64x1", "--dtypes", "float16,int8",
                           "--warmup", "0", "--repeats", "1", "--reference-repeats", "0", "--sweep-mb", "0"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, check=True)
    lines = done.stdout.splitlines()
    measured = [(w.name, dtype) for w in bench.workloads(tiny=True) if "decode 64x1" in w.name
                for dtype in ("float16", "int8")]
    assert len(measured) == 6
    steps = [i for i, line in enumerate(lines) if line.startswith("ascend-kv bench: measuring [")]
    assert len(steps) == len(measured) + 1                                   # and the small-call overhead last
    for i, (step, (name, dtype)) in enumerate(zip(steps, measured), 1):
        assert lines[step] == f"ascend-kv bench: measuring [{i}/7] {name}, {dtype} ..."
        assert lines[step + 1].split()[:len(name.split()) + 2] == [*name.split(), dtype, "fallback"]
    assert lines[steps[-1]] == "ascend-kv bench: measuring [7/7] small-call overhead ..."
    assert lines[steps[-1] + 1] == "" and lines[steps[-1] + 2].startswith("small-call overhead (")


def test_reference_can_be_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--tiny", "--only", "decode 64x1 h1024", "--dtypes", "int8", "--repeats", "1",
                       "--reference-repeats", "0", "--backends", "fallback"]) == 0
    assert "reference 0 rounds" in capsys.readouterr().out


def test_unavailable_backend_is_reported_not_fatal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "bench.json"
    assert bench.main(["--tiny", "--only", "paged ND 8x2048 8x128", "--dtypes", "float16", "--repeats", "1",
                       "--reference-repeats", "0", "--backends", "fallback,npu", "--json", str(out_json)]) == 0
    assert "npu       unavailable:" in capsys.readouterr().out                 # CPU tensors: no NPU here
    rows = json.loads(out_json.read_text())["results"]
    assert [(r["backend"], "unavailable" in r) for r in rows] == [("npu", True), ("fallback", False)]


@pytest.mark.parametrize("argv, message", [
    (["--repeats", "0"], "--repeats"),
    (["--dtypes", "float32"], "--dtypes takes"),
    (["--backends", "fallback,gpu"], "--backends takes"),
    (["--sweep-mb", "-1"], "--sweep-mb"),
])
def test_bad_arguments_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(argv) == 2
    assert message in capsys.readouterr().err


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
