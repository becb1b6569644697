"""``ascend_kv.testing`` as a serving engine's test suite adopts it: the stand-in, ``install_cache_ops``, the docs.

The stand-in must let serving code import unchanged (names and submodules it does not
implement come from its base) and leave ``sys.modules`` and ``torch.npu`` as it found them;
``install_cache_ops`` must keep a stub's MagicMocks recording calls and its pass-through
``npu_format_cast``; the conftests of docs/porting_from_torch_npu.md must run as written.
"""

from __future__ import annotations

import doctest
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import pytest
import torch

import ascend_kv
from ascend_kv import testing
from ascend_kv.compat import formats
from ascend_kv.compat import torch_npu as facade

PORTING = Path(__file__).resolve().parents[1] / "docs" / "porting_from_torch_npu.md"

#: A module of serving code: every way it reaches torch_npu (vllm-ascend's imports among them).
SERVING_MODULE = """
import torch_npu
import torch_npu.atb
import torch_npu._inductor
from torch_npu import npu_fusion_attention, float4_e2m1fn_x2, _npu_reshape_and_cache
from torch_npu._C._distributed_c10d import ProcessGroupHCCL
from torch_npu.op_plugin.atb._atb_ops import _register_atb_extensions
from torch_npu.profiler import dynamic_profile as dp
"""


def torch_npu_modules() -> dict[str, Any]:
    return {name: module for name, module in sys.modules.items() if name == "torch_npu" or name.startswith("torch_npu.")}


# ----------------------------------------------------------------------------- the stand-in


def test_serving_code_imports_under_a_magicmock_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "serving_code.py").write_text(SERVING_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    base = MagicMock()
    with testing.torch_npu_stand_in(base=base):
        import torch_npu

        assert torch_npu.npu_fusion_attention is base.npu_fusion_attention
        import serving_code

        assert serving_code.npu_fusion_attention is base.npu_fusion_attention
        assert serving_code.ProcessGroupHCCL is base._C._distributed_c10d.ProcessGroupHCCL
        assert serving_code.dp is base.profiler.dynamic_profile
        assert serving_code._npu_reshape_and_cache is facade._npu_reshape_and_cache
        assert serving_code.torch_npu.atb.npu_paged_cache_load is facade.atb.npu_paged_cache_load
        assert serving_code.torch_npu.atb.npu_paged_attention is base.atb.npu_paged_attention
    sys.modules.pop("serving_code")
    assert not torch_npu_modules()
    assert not base.mock_calls  # the base was read, never called or changed


def test_the_default_base_is_a_magicmock_with_no_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch, "npu", raising=False)
    with testing.torch_npu_stand_in() as torch_npu:
        assert torch.npu is torch_npu.npu and torch.npu.is_available() is False and torch.npu.device_count() == 0
        assert isinstance(torch_npu.npu_fused_infer_attention_score, MagicMock)
        assert torch_npu.npu_scatter_pa_kv_cache is facade.npu_scatter_pa_kv_cache
        assert ascend_kv.dispatch.device.torch_npu.__wrapped__().module is None  # ascend_kv sees no NPU library
    assert not hasattr(torch, "npu")


def test_an_existing_torch_npu_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    npu = MagicMock()
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    with testing.torch_npu_stand_in():
        assert torch.npu is npu
    assert torch.npu is npu


def test_a_module_base_answers_what_it_has_and_only_that() -> None:
    """The base may be a suite's own stub (a module): its names come through, unchanged; a name it lacks fails to import."""
    base = types.ModuleType("torch_npu")
    base.npu_rms_norm = MagicMock()  # type: ignore[attr-defined]
    base._npu_reshape_and_cache = reshape_mock = MagicMock()  # type: ignore[attr-defined]
    with testing.torch_npu_stand_in(base=base) as torch_npu:
        from torch_npu import npu_rms_norm

        assert npu_rms_norm is base.npu_rms_norm
        assert torch_npu._npu_reshape_and_cache is facade._npu_reshape_and_cache
        assert isinstance(torch_npu.npu, MagicMock) and torch_npu.npu.is_available() is False
        with pytest.raises(ImportError, match="npu_fusion_attention"):
            from torch_npu import npu_fusion_attention  # noqa: F401
        with pytest.raises(ModuleNotFoundError):
            import torch_npu.contrib
    assert base._npu_reshape_and_cache is reshape_mock and not reshape_mock.called  # type: ignore[attr-defined]
    assert not hasattr(base, "STAND_IN") and not hasattr(base, "npu_scatter_pa_kv_cache")


def test_sys_modules_are_restored_with_submodules() -> None:
    before = {"torch_npu": MagicMock(), "torch_npu._C": MagicMock()}
    sys.modules.update(before)
    try:
        with testing.torch_npu_stand_in() as torch_npu:
            assert sys.modules["torch_npu"] is torch_npu and "torch_npu._C" not in sys.modules
            import torch_npu._C
            import torch_npu.npu.utils

            assert sys.modules["torch_npu._C"] is not before["torch_npu._C"]
        assert torch_npu_modules() == before
    finally:
        for name in before:
            sys.modules.pop(name)
    with testing.torch_npu_stand_in():
        pass
    assert not torch_npu_modules()


def test_the_stand_in_runs_the_cache_ops_and_passes_mock_weights_through() -> None:
    with testing.torch_npu_stand_in() as torch_npu:
        weight = MagicMock()
        assert torch_npu.npu_format_cast(weight, 29) is weight
        kv = torch_npu.empty_with_format([2, 2, 4, 16, 16], dtype=torch.float16, acl_format=29).zero_()
        key = torch.randn(2, 4, 16, dtype=torch.float16)
        torch_npu._npu_reshape_and_cache(key, key, kv[0], kv[1], torch.tensor([3, 17], dtype=torch.int32))
        assert torch.equal(kv[0, 0, :, 3, :], key[0]) and torch.equal(kv[1, 1, :, 1, :], key[1])  # NZ: [T // E, E]


# ----------------------------------------------------------------------------- install_cache_ops


def test_install_keeps_a_magicmocks_call_recording() -> None:
    torch_npu = MagicMock()
    reshape = torch_npu._npu_reshape_and_cache
    testing.install_cache_ops(torch_npu)
    assert torch_npu._npu_reshape_and_cache is reshape  # code that bound the mock at import runs the op too
    key_cache, value_cache = torch.zeros(2, 2, 16, 1, 8)
    key = torch.randn(1, 1, 8)
    reshape(key=key, value=key, key_cache=key_cache, value_cache=value_cache,
            slot_indices=torch.tensor([20], dtype=torch.int32))
    torch_npu._npu_reshape_and_cache.assert_called_once()
    assert torch.equal(key_cache[1, 4], key[0])
    out = torch_npu.atb.npu_paged_cache_load(key_cache, value_cache, torch.tensor([[1]]), torch.tensor([5]))
    torch_npu.atb.npu_paged_cache_load.assert_called_once()
    assert torch.equal(out[0][4], key[0])
    with pytest.raises(ValueError, match="slot_indices.0. = 99"):  # errors still raise, and are recorded
        reshape(key, key, key_cache, value_cache, torch.tensor([99], dtype=torch.int32))
    assert reshape.call_count == 2


def test_install_on_vllm_ascends_stub_shape() -> None:
    """A ``types.ModuleType`` of MagicMocks: its mocks stay (as side effects), missing ops become functions."""
    stub = types.ModuleType("torch_npu")
    stub._npu_reshape_and_cache = reshape = MagicMock()  # type: ignore[attr-defined]
    stub.npu_format_cast = cast = MagicMock(side_effect=lambda weight, fmt: weight)  # type: ignore[attr-defined]
    testing.install_cache_ops(stub)
    assert stub._npu_reshape_and_cache is reshape and stub.npu_format_cast is cast  # type: ignore[attr-defined]
    assert stub.npu_scatter_pa_kv_cache is facade.npu_scatter_pa_kv_cache  # type: ignore[attr-defined]
    assert isinstance(stub.atb, types.ModuleType)  # type: ignore[attr-defined]
    assert stub.atb.npu_paged_cache_load is facade.atb.npu_paged_cache_load  # type: ignore[attr-defined]
    assert stub.STAND_IN is True  # type: ignore[attr-defined]
    weight = MagicMock()
    assert cast(weight, 29) is weight
    tagged = cast(torch.zeros(2, 2, 16, 16), 29)
    assert facade.get_npu_format(tagged) == 29 and cast.call_count == 2


def test_install_without_keeping_mocks_and_on_an_installed_package() -> None:
    real = types.ModuleType("torch_npu")
    real.__file__ = "/site-packages/torch_npu/__init__.py"
    real._npu_reshape_and_cache = MagicMock()  # type: ignore[attr-defined]
    testing.install_cache_ops(real, keep_mocks=False)
    assert real._npu_reshape_and_cache is facade._npu_reshape_and_cache  # type: ignore[attr-defined]
    assert real.npu_format_cast is testing.npu_format_cast  # type: ignore[attr-defined]
    assert not hasattr(real, "STAND_IN")  # an installed torch_npu is not marked as a stand-in


def test_the_fixture_restores_attributes_and_side_effects(install_torch_npu_cache_ops: Any) -> None:
    stub = types.ModuleType("torch_npu")
    stub.npu_format_cast = MagicMock(side_effect=lambda weight, fmt: weight)  # type: ignore[attr-defined]
    original = stub.npu_format_cast.side_effect  # type: ignore[attr-defined]
    restore = testing._restorer(stub)
    install_torch_npu_cache_ops(stub)
    assert stub.npu_format_cast.side_effect is testing.npu_format_cast  # type: ignore[attr-defined]
    restore()
    assert stub.npu_format_cast.side_effect is original  # type: ignore[attr-defined]
    assert not any(hasattr(stub, name) for name in ("atb", "STAND_IN", "_npu_reshape_and_cache"))


def test_the_pytest_fixtures(stand_in_torch_npu: Any, install_torch_npu_cache_ops: Any) -> None:
    """The plugin's fixtures (its pytest11 entry point loads it into every pytest run of this environment)."""
    import torch_npu

    assert torch_npu is stand_in_torch_npu and torch_npu._npu_reshape_and_cache is facade._npu_reshape_and_cache
    mock = install_torch_npu_cache_ops(MagicMock())
    key_cache = torch.zeros(1, 16, 1, 8)
    mock._npu_reshape_and_cache(torch.ones(1, 1, 8), torch.ones(1, 1, 8), key_cache, key_cache.clone(),
                                torch.tensor([2], dtype=torch.int32))
    mock._npu_reshape_and_cache.assert_called_once()
    assert key_cache[0, 2].sum() == 8


def test_the_installed_distribution_registers_the_pytest_plugin() -> None:
    from importlib.metadata import entry_points

    plugins = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert plugins.get("ascend_kv.testing") == "ascend_kv.testing"


# ----------------------------------------------------------------------------- the docs, as written


def porting_conftests() -> dict[str, dict[str, str]]:
    """The porting doc's test projects: under each ``###`` heading, the python blocks whose first line is
    ``# <file>.py``, by file name."""
    projects: dict[str, dict[str, str]] = {}
    for section in re.split(r"^### ", PORTING.read_text(), flags=re.MULTILINE)[1:]:
        files = {}
        for block in re.findall(r"```python\n(.*?)```", section, re.DOTALL):
            name = re.match(r"# (\w+\.py)\b", block)
            if name:
                files[name.group(1)] = block
        if "conftest.py" in files:
            projects[section.splitlines()[0].strip()] = files
    return projects


def test_the_porting_doc_has_both_conftests() -> None:
    assert len(porting_conftests()) == 2, list(porting_conftests())


@pytest.mark.parametrize("heading", list(porting_conftests()))
def test_the_porting_docs_conftests_run_as_written(heading: str, tmp_path: Path) -> None:
    """Each project of the doc (conftest, its code, its tests) in a fresh pytest process; every test passes."""
    for name, text in porting_conftests()[heading].items():
        (tmp_path / name).write_text(text)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         check=False, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"\b[2-9] passed\b", run.stdout) and "failed" not in run.stdout, run.stdout


@pytest.mark.parametrize("module", [testing, facade, formats], ids=lambda m: m.__name__)
def test_the_docstring_examples_run(module: types.ModuleType) -> None:
    results = doctest.testmod(module, extraglobs={"torch": torch, "ascend_kv": ascend_kv}, optionflags=doctest.ELLIPSIS)
    assert results.failed == 0 and results.attempted > 0


def test_cli_lists_the_facade() -> None:
    import ascend_kv.tools.cli

    assert set(ascend_kv.tools.cli.TORCH_NPU_FACADE) == {*facade.__all__} - {"atb"} | {"atb.npu_paged_cache_load"}

