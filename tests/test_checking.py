"""Do the checking helpers fail clearly, and refuse objects that only pretend to be right?"""

from __future__ import annotations

import warnings

import pytest
import torch

from course.checking import CheckFailure, assert_close, call, expect_tensor, forbid, quiet


class AlwaysEqual(torch.Tensor):
    """A tensor subclass whose comparisons always say yes."""

    def __eq__(self, other):  # noqa: D105
        return True

    def allclose(self, *args, **kwargs):  # noqa: D102
        return True


def test_expect_tensor_rejects_a_tensor_subclass_that_always_agrees():
    """Is a Tensor subclass whose __eq__/allclose always say yes rejected by type?"""
    fake = torch.zeros(2).as_subclass(AlwaysEqual)
    with pytest.raises(CheckFailure, match="should be a torch.Tensor"):
        expect_tensor(fake, "output", shape=(2,))


def test_expect_tensor_reports_shape_then_nan():
    """Does the message name the wrong shape, and NaN with the overflow hint?"""
    with pytest.raises(CheckFailure, match=r"shape \(2, 3\), expected \(3, 2\)"):
        expect_tensor(torch.zeros(2, 3), "w", shape=(3, 2))
    with pytest.raises(CheckFailure, match="subtract the row maximum"):
        expect_tensor(torch.tensor([float("nan"), 1.0]), "w")


def test_expect_tensor_flags_a_missing_return():
    """Does a function that returns None get a hint about returning?"""
    with pytest.raises(CheckFailure, match="forget to return"):
        expect_tensor(None, "output")


def test_assert_close_names_the_worst_element():
    """Does assert_close report the index and values of the largest difference?"""
    with pytest.raises(CheckFailure, match=r"index \(1,\).*got 5.*expected 2"):
        assert_close(torch.tensor([1.0, 5.0]), torch.tensor([1.0, 2.0]), "x")


def test_call_turns_classic_errors_into_hints():
    """Do torch.mm on 3-D tensors and a stub give the matching advice?"""
    with pytest.raises(CheckFailure, match="torch.mm only multiplies 2-D"):
        call(lambda a: torch.mm(a, a), torch.zeros(2, 3, 3), name="f")

    def stub():
        raise NotImplementedError()

    with pytest.raises(CheckFailure, match="still raises NotImplementedError"):
        call(stub)


def test_call_hints_a_missing_super_init():
    """Does a module without super().__init__() get the super() hint?"""

    class Broken(torch.nn.Module):
        def __init__(self):
            self.lin = torch.nn.Linear(2, 2)

    with pytest.raises(CheckFailure, match=r"super\(\).__init__\(\)"):
        call(Broken)


def test_forbid_blocks_then_restores():
    """Is torch.softmax blocked inside forbid() and restored afterwards?"""
    original = torch.softmax
    with forbid("torch.softmax", "torch.Tensor.softmax") as called:
        with pytest.raises(CheckFailure, match="called torch.softmax"):
            call(lambda x: torch.softmax(x, -1), torch.zeros(3))
        with pytest.raises(CheckFailure, match=r"called torch.Tensor.softmax"):
            call(lambda x: x.softmax(-1), torch.zeros(3))
    assert called == ["torch.softmax", "torch.Tensor.softmax"]
    assert torch.softmax is original
    assert torch.zeros(3).softmax(-1).shape == (3,)


def test_quiet_keeps_warnings_off_stderr(capfd):
    """Does a warning raised inside quiet() stay off stderr (nbgrader zeroes stderr)?"""
    with quiet():
        warnings.warn("deprecated thing", UserWarning, stacklevel=1)
    assert "deprecated thing" not in capfd.readouterr().err


def test_a_float_size_in_view_gets_the_integer_division_hint():
    """view(B, T, H, d_model / H) fails with 'type must be tuple of ints,but got float'."""
    from course.checking import _hint_for

    exc = TypeError("view(): argument 'size' failed to unpack the object at pos 4 with error "
                    "\"type must be tuple of ints,but got float\"")
    assert "integer division" in _hint_for(exc)


def test_assert_close_names_the_entries_of_a_dictionary_not_indices():
    """Does a value built from a dictionary get the names of its differing entries, and no
    "Where:" line about indices (which mean nothing for a dictionary)?"""
    with pytest.raises(CheckFailure) as info:
        assert_close(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.5, 4.0]), "changes",
                     labels=["layer.weight", "layer.bias", "extra"])
    message = str(info.value)
    assert "'layer.bias', 'extra'" in message and "'extra' (got 3, expected 4)" in message
    assert "Where:" not in message and "index" not in message
