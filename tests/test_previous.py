"""Unit tests of course.previous.load_previous: the learner's code, or a stand-in."""

from __future__ import annotations

import torch

from autograder.authoring.author import text_to_notebook
from course import previous, standins

DAY = "day02_queries_keys_values"

GOOD = '''# %% id=setup
import math
import torch
SCALE_NOTE = "kept"
torch.manual_seed(0)
print("this setup line must not run")
# %% solution id=day02_attention
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    return w @ V, w
# %% test id=day02_attention_values
raise RuntimeError("tests must not run")
'''

STUB = '''# %% id=setup
import torch
# %% solution id=day02_attention
def scaled_dot_product_attention(Q, K, V, mask=None):
    raise NotImplementedError()
'''


def _write(tmp_path, text: str) -> None:
    import nbformat

    folder = tmp_path / DAY
    folder.mkdir()
    nbformat.write(text_to_notebook(text), str(folder / f"{DAY}.ipynb"))


def test_learners_own_code_is_returned(tmp_path, monkeypatch, capsys):
    """Is a working earlier answer returned, with only imports, constants and answers run?"""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("COURSE_USE_STANDINS", raising=False)
    _write(tmp_path, GOOD)
    fn = previous.load_previous(DAY, "scaled_dot_product_attention", folder=tmp_path)
    assert fn is not standins.scaled_dot_product_attention
    assert fn.__globals__["SCALE_NOTE"] == "kept"
    out = capsys.readouterr().out
    assert "using your scaled_dot_product_attention" in out
    assert "must not run" not in out


def test_stub_falls_back_with_one_line(tmp_path, monkeypatch, capsys):
    """Does an answer that still raises NotImplementedError give the stand-in and say why?"""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("COURSE_USE_STANDINS", raising=False)
    _write(tmp_path, STUB)
    fn = previous.load_previous(DAY, "scaled_dot_product_attention", folder=tmp_path)
    assert fn is standins.scaled_dot_product_attention
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and "NotImplementedError" in lines[0]


def test_missing_notebook_falls_back(tmp_path, monkeypatch, capsys):
    """Does a missing notebook give the stand-ins, several names as a tuple?"""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("COURSE_USE_STANDINS", raising=False)
    got = previous.load_previous("day06_encoder_layer", "LayerNorm", "TransformerEncoderLayer",
                                 folder=tmp_path)
    assert got == (standins.LayerNorm, standins.TransformerEncoderLayer)
    assert "no notebook" in capsys.readouterr().out


def test_grading_always_uses_standins(tmp_path, monkeypatch):
    """While nbgrader grades, is the stand-in used even when the learner's notebook works?"""
    _write(tmp_path, GOOD)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    fn = previous.load_previous(DAY, "scaled_dot_product_attention", folder=tmp_path)
    assert fn is standins.scaled_dot_product_attention
    layer = previous.load_previous("day06_encoder_layer", "TransformerEncoderLayer")(8, 2, 16)
    assert layer(torch.zeros(1, 3, 8)).shape == (1, 3, 8)


def test_unknown_name_is_a_clear_error(tmp_path, monkeypatch):
    """Does a name with neither a notebook nor a stand-in raise a LookupError that says so?"""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    try:
        previous.load_previous(DAY, "nothing_here", folder=tmp_path)
    except LookupError as exc:
        assert "no stand-in" in str(exc)
    else:
        raise AssertionError("no LookupError")
