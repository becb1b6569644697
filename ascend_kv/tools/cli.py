"""The ``ascend-kv`` command (also ``python -m ascend_kv``).

Subcommands:

``support-matrix [--soc NAME] [--json]``
    The support matrix, or the answer for one SoC name; exits 2 for an unknown SoC name.
``info [--json]``
    torch and torch_npu versions, whether the CANN runtime loaded (and why not), the SoC and
    its product line, whether the kernel library is loaded, which backend each operation
    would use, and why, and the intra-op threads the host paths run over.
``explain OP [--soc NAME | --device DEVICE] [--backend NAME] [--json]``
    What :func:`ascend_kv.explain` answers for one operation: the backend that would run it and
    why; with ``--soc``, on an NPU of that SoC (asked on any machine; exits 2 for an unknown SoC name).
``demo ...`` / ``bench ...``
    :func:`ascend_kv.tools.demo.main` / :func:`ascend_kv.tools.bench.main` with the remaining arguments.

In every subcommand a bad setting (``ASCEND_KV_BACKEND``, ``ASCEND_KV_VALIDATE``) or a forced
backend that cannot run is one line on stderr and exit status 2; a reader that closes stdout
(``ascend-kv demo | head``) ends the command quietly, with status 0.

Importing :mod:`ascend_kv` first (as running this module does) makes ``import torch``
survive torch_npu without CANN; see :mod:`ascend_kv.dispatch.autoload`.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import torch

from .. import __version__
from ..api.errors import BackendUnavailableError
from ..backends import npu
from ..dispatch import autoload, device, policy, support
from ..dispatch.settings import SettingError


def _support_matrix(args: argparse.Namespace) -> int:
    if args.soc is None:
        if args.json:
            lines = [{"id": line.id, "name": line.name, "soc_names": line.soc_names, **support.line_answer(line)}
                     for line in support.PRODUCT_LINES]
            print(json.dumps({"operations": list(support.OPERATIONS), "product_lines": lines}, indent=2))
        else:
            print(support.markdown_table(), end="")
        return 0
    answer = support.soc_answer(args.soc)
    line = support.product_line(args.soc)
    if args.json:
        print(json.dumps(answer, indent=2))
    elif line is not None:
        ops = ", ".join(f"{op} {'yes' if ok else 'no'}" for op, ok in answer["ops"].items())
        print(f"{args.soc.strip()}: {line.id} ({line.name}): {ops}")
    if line is None:
        families = "; ".join(f"{line.id}: {line.soc_names}" for line in support.PRODUCT_LINES)
        print(f"ascend-kv: unknown SoC name {args.soc!r}. Known families: {families}", file=sys.stderr)
        return 2
    return 0


def info_report() -> dict[str, Any]:
    """Everything ``ascend-kv info`` reports, as a JSON-ready dict."""
    imported = device.torch_npu()
    runtime = device.npu_runtime()
    soc, soc_source = device.host_soc()
    line = support.product_line(soc) if soc is not None else None
    library = npu.library()
    if imported.version is None:
        cann = {"loaded": False, "reason": "not checked: torch_npu (which loads CANN) is not installed"}
    else:
        cann = {"loaded": imported.module is not None, "reason": imported.reason}
    requested = policy.requested_backend()
    decisions = {op: policy.explain(op, backend=requested) for op in support.OPERATIONS}
    return {
        "ascend_kv": __version__,
        "torch": torch.__version__,
        "torch_npu": {"installed": imported.version, "loaded": imported.module is not None},
        "cann": cann,
        "torch_autoload_broken": "torch_npu" in autoload.failures,
        "advice": device.advice(),
        "npu": {"available": runtime.available, "device_count": runtime.device_count, "reason": runtime.reason},
        "soc": {"name": soc, "source": soc_source, "product_line": None if line is None else line.id},
        "kernel_library": {"loaded": library.loaded, "path": library.path, "reason": library.reason},
        "requested_backend": requested,
        "intra_op_threads": torch.get_num_threads(),
        "device": next(iter(decisions.values())).device,
        "ops": {op: {"backend": d.backend, "reason": d.reason} for op, d in decisions.items()},
        "element_types": policy.element_types_note(),
        "torch_npu_facade": {"module": "ascend_kv.compat.torch_npu", "functions": list(TORCH_NPU_FACADE),
                             "test_helpers": "ascend_kv.testing (torch_npu_stand_in, install_cache_ops)"},
    }


#: What ``ascend_kv.compat.torch_npu`` offers under torch_npu's names (docs/porting_from_torch_npu.md).
TORCH_NPU_FACADE = ("_npu_reshape_and_cache", "_npu_reshape_and_cache_siso", "npu_scatter_pa_kv_cache",
                    "npu_gather_pa_kv_cache", "atb.npu_paged_cache_load", "npu_format_cast", "get_npu_format",
                    "empty_with_format", "npu_dynamic_quant", "npu_scatter_nd_update_", "npu_scatter_nd_update",
                    "swap_blocks_batch")  # the last: vllm-ascend's _C_ascend op


def _info(args: argparse.Namespace) -> int:
    report = info_report()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    tnpu, cann, npu_state, soc, lib = (report[k] for k in ("torch_npu", "cann", "npu", "soc", "kernel_library"))
    lines = [
        f"ascend_kv       {report['ascend_kv']}",
        f"torch           {report['torch']}",
        f"torch_npu       {tnpu['installed'] or 'not installed'}" + ("" if tnpu["loaded"] else " (not loaded)"),
        f"CANN runtime    {'loaded' if cann['loaded'] else 'not loaded: ' + str(cann['reason'])}",
        f"NPU             {npu_state['device_count']} device(s)" if npu_state["available"]
        else f"NPU             none: {npu_state['reason']}",
        _soc_line(soc),
        f"kernel library  {'loaded from ' + lib['path'] if lib['loaded'] else 'not loaded: ' + lib['reason']}",
        f"backend         {report['requested_backend']} requested, tensors on {report['device']}",
        (f"host threads    {report['intra_op_threads']} (torch's intra-op threads: the host paths of CPU calls "
         "run over them)"),
    ]
    width = max(map(len, report["ops"])) + 1
    for op, decision in report["ops"].items():
        runs = decision["backend"] or "cannot run"
        lines.append(f"{op:<{width}}{runs}: {decision['reason']}")
    lines.append(f"element types   {report['element_types']}")
    facade = report["torch_npu_facade"]
    lines.append(f"torch_npu names {facade['module']}: {', '.join(facade['functions'])}; tests: {facade['test_helpers']}")
    if report["advice"]:
        lines.append(f"note: {report['advice']}")
    print("\n".join(lines))
    return 0


def _soc_line(soc: dict[str, Any]) -> str:
    if soc["name"] is None:
        return "SoC             unknown (no NPU; set ASCEND_KV_SOC to ask about one)"
    if soc["product_line"] is None:
        return f"SoC             {soc['name']} ({soc['source']}): not a known Ascend SoC (see `ascend-kv support-matrix`)"
    return f"SoC             {soc['name']} ({soc['source']}), product line {soc['product_line']}"


def _explain(args: argparse.Namespace) -> int:
    decision = policy.explain(args.op, args.device, args.backend, soc=args.soc)
    if args.json:
        print(json.dumps(dataclasses.asdict(decision), indent=2))
        return 0
    print(decision)
    for label, note in (("element types", decision.element_types), ("quantization", decision.quantization)):
        if note:
            print(f"{label}: {note}")
    return 2 if args.soc is not None and decision.product_line is None else 0  # an unknown SoC, as support-matrix


def _delegate(module: str, argv: Sequence[str]) -> int:
    result = importlib.import_module(module).main(list(argv))
    return int(result or 0)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``ascend-kv``."""
    parser = argparse.ArgumentParser(
        prog="ascend-kv",
        description=(f"ATB's KV-cache operations for Ascend NPUs ({', '.join(support.OPERATIONS)}) and the cache "
                     f"operations serving engines build around them. Operations: {', '.join(policy.FUNCTIONS)}."),
    )
    parser.add_argument("--version", action="version", version=f"ascend_kv {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    matrix = commands.add_parser("support-matrix", help="which product lines / SoCs the kernels support")
    matrix.add_argument("--soc", metavar="NAME", help="answer for one SoC name, e.g. Ascend910B3")
    matrix.add_argument("--json", action="store_true", help="machine-readable output")
    info = commands.add_parser("info", help="runtime, SoC, kernel library, and which backend runs each op")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    explain = commands.add_parser("explain", help="which backend would run an operation, and why")
    explain.add_argument("op", help="a function's name (e.g. reshape_and_cache) or an ATB name (ReshapeAndCacheOperation)")
    where = explain.add_mutually_exclusive_group()
    where.add_argument("--soc", metavar="NAME", help="on an NPU of this SoC, e.g. Ascend910B3 (asked on any machine)")
    where.add_argument("--device", help="the tensors' device (default: NPU 0 when there is one, else cpu)")
    explain.add_argument("--backend", choices=policy.BACKEND_CHOICES, help="the requested backend (default: current)")
    explain.add_argument("--json", action="store_true", help="machine-readable output")
    for name, text in (("demo", "every operation on realistic shapes, checked"), ("bench", "benchmarks")):
        sub = commands.add_parser(name, help=text, add_help=False, prefix_chars="\0")
        sub.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ascend-kv`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        if args.command in ("demo", "bench"):
            return _delegate(f"ascend_kv.tools.{args.command}", args.args)
        if args.command == "explain":
            return _explain(args)
        return _support_matrix(args) if args.command == "support-matrix" else _info(args)
    except (SettingError, BackendUnavailableError, ValueError) as error:  # a bad setting, a backend that cannot
        # run, an operation or SoC name explain() does not know
        print(f"ascend-kv: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`ascend-kv demo | head`): not an error
        _discard_stdout()
        return 0


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of a closed pipe does not fail too."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file (replaced, as under pytest)
        pass
