"""The package's environment variables: a misspelled value is an error at the first call, whichever
variable it is, naming the variable, the value given and the values accepted."""

from __future__ import annotations

import pytest
import torch

import ascend_kv
from ascend_kv.dispatch import policy, validation
from ascend_kv.dispatch.settings import SettingError


def write_one_row() -> torch.Tensor:
    """A host ``kv_cache`` call (it never needs the validation mode); returns the cache."""
    past = torch.zeros(1, 1, 4, 16, dtype=torch.float16)
    ascend_kv.kv_cache(torch.ones(1, 16, dtype=torch.float16), 0, past, torch.tensor([1]), torch.tensor([1]))
    return past


@pytest.fixture(autouse=True)
def read_the_variables_again() -> None:
    validation.environment_mode.cache_clear()
    policy.environment_backend.cache_clear()


@pytest.mark.parametrize("value", ["ful", "fulll", "devices", "on", "1"])
def test_a_misspelled_validation_mode_fails_the_first_call(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(validation.VALIDATE_ENV, value)
    past = torch.zeros(1, 1, 4, 16, dtype=torch.float16)
    with pytest.raises(SettingError, match=f"^ASCEND_KV_VALIDATE must be one of device, full, got '{value}'$"):
        ascend_kv.kv_cache(torch.ones(1, 16, dtype=torch.float16), 0, past, torch.tensor([1]), torch.tensor([1]))
    assert not past.any()                                                   # a call that raises writes nothing
    with pytest.raises(ValueError, match="ASCEND_KV_VALIDATE"):              # and every call after it, too
        ascend_kv.explain("kv_cache", "cpu")


@pytest.mark.parametrize(("value", "mode"), [("full", "full"), (" FULL ", "full"), ("device", "device"), ("", "device")])
def test_the_accepted_validation_modes(monkeypatch: pytest.MonkeyPatch, value: str, mode: str) -> None:
    monkeypatch.setenv(validation.VALIDATE_ENV, value)
    assert write_one_row()[0, 0, 0].eq(1).all()
    assert validation.environment_mode() == mode


def test_a_misspelled_backend_fails_the_first_call_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(policy.BACKEND_ENV, "fallbak")
    with pytest.raises(SettingError, match="^ASCEND_KV_BACKEND must be one of auto, npu, sim, fallback, got 'fallbak'$"):
        write_one_row()


HOST_PATHS, SIM = 0, 1  # positions in torch.ops.ascend_kv._runs()


def ran_on() -> str:
    """Where ``write_one_row()`` ran: ``"fallback"`` (the host paths) or ``"sim"``."""
    before = torch.ops.ascend_kv._runs()
    assert write_one_row()[0, 0, 0].eq(1).all()
    after = torch.ops.ascend_kv._runs()
    moved = [a - b for a, b in zip(after, before)]
    assert sorted(moved) == [0, 0, 0, 1], moved
    return {HOST_PATHS: "fallback", SIM: "sim"}[moved.index(1)]


def test_the_operators_read_the_backend_variable_once_until_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator library keeps the variable's value as Python read it; ``cache_clear()`` makes both read it again."""
    monkeypatch.setenv(policy.BACKEND_ENV, "sim")
    policy.environment_backend.cache_clear()
    assert ran_on() == "sim"
    monkeypatch.setenv(policy.BACKEND_ENV, "fallback")
    assert ran_on() == "sim" and policy.requested_backend() == "sim"           # read once
    policy.environment_backend.cache_clear()
    assert ran_on() == "fallback"
    monkeypatch.setenv(policy.BACKEND_ENV, "sim")
    policy.forget()               # the operators ask Python again, which still holds the value it read once
    assert ran_on() == "fallback" == policy.requested_backend()


def test_a_with_block_reaches_the_operators_of_its_own_thread_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setenv(policy.BACKEND_ENV, "fallback")
    policy.environment_backend.cache_clear()
    seen: dict[str, str] = {}

    def other_thread() -> None:
        seen["other, outside a block"] = ran_on()
        with ascend_kv.use_backend("sim"):
            seen["other, in its block"] = ran_on()

    with ascend_kv.use_backend("sim"):
        assert ran_on() == "sim"
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        with ascend_kv.use_backend("fallback"):
            assert ran_on() == "fallback"
        assert ran_on() == "sim"                                                 # the outer block's value again
    assert ran_on() == "fallback"
    assert seen == {"other, outside a block": "fallback", "other, in its block": "sim"}
