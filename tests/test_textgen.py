"""Tests for course.textgen: the stand-in GPT, the Day 12 loader, figures and measurements."""

from __future__ import annotations

import math

import matplotlib
import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

matplotlib.use("Agg")

from course import textgen  # noqa: E402


def _notebook(path, *sources: str) -> None:
    nb = nbformat.v4.new_notebook()
    for i, src in enumerate(sources):
        cell = nbformat.v4.new_code_cell(src)
        cell.metadata["nbgrader"] = {"solution": True, "grade": False, "locked": False,
                                     "grade_id": f"answer{i}", "schema_version": 3}
        nb.cells.append(cell)
    nbformat.write(nb, str(path))


def test_reference_gpt_shapes_and_causality():
    """Does the stand-in map (B, N) ids to (B, N, V) logits without looking at the future?"""
    torch.manual_seed(0)
    model = textgen.ReferenceTinyGPT(11, d_model=16, num_heads=2, num_layers=2, n_ctx=8).eval()
    idx = torch.randint(0, 11, (3, 8))
    changed = idx.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 11
    with torch.no_grad():
        a, b = model(idx), model(changed)
    assert a.shape == (3, 8, 11)
    assert torch.allclose(a[:, :5], b[:, :5], atol=1e-6)
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_reference_gpt_rejects_long_sequences():
    """Does a sequence longer than n_ctx raise a ValueError naming both lengths?"""
    model = textgen.ReferenceTinyGPT(5, d_model=8, num_heads=2, num_layers=1, n_ctx=4)
    with pytest.raises(ValueError, match=r"6.*4"):
        model(torch.zeros(1, 6, dtype=torch.long))


def test_load_tinygpt_uses_standin_while_grading(monkeypatch, tmp_path):
    """Is the stand-in always used while nbgrader grades, even if Day 12 exists?"""
    nb = tmp_path / "day12.ipynb"
    _notebook(nb, "from course.textgen import ReferenceTinyGPT as TinyGPT")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert textgen.load_tinygpt(nb, verbose=False) is textgen.ReferenceTinyGPT


def test_load_tinygpt_missing_notebook(monkeypatch, tmp_path):
    """Does a missing Day 12 notebook fall back to the stand-in with a message?"""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert textgen.load_tinygpt(tmp_path / "nope.ipynb", verbose=False) is \
        textgen.ReferenceTinyGPT


def test_load_tinygpt_reads_answer_cells(monkeypatch, tmp_path):
    """Is a working TinyGPT defined in the answer cells returned as is?"""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    nb = tmp_path / "day12.ipynb"
    _notebook(nb, "from course.textgen import ReferenceTinyGPT\n\n"
                  "class TinyGPT(ReferenceTinyGPT):\n    marker = 'learner'\n")
    cls = textgen.load_tinygpt(nb, verbose=False)
    assert getattr(cls, "marker", None) == "learner"


def test_load_tinygpt_unfinished_answer(monkeypatch, tmp_path, capsys):
    """Does an unfinished Day 12 (NotImplementedError) fall back and say why?"""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    nb = tmp_path / "day12.ipynb"
    _notebook(nb, "import torch.nn as nn", "class TinyGPT(nn.Module):\n"
                  "    def __init__(self, *a, **k):\n"
                  "        super().__init__()\n"
                  "        raise NotImplementedError()\n")
    assert textgen.load_tinygpt(nb) is textgen.ReferenceTinyGPT
    assert "NotImplementedError" in capsys.readouterr().out


def test_causal_influence_is_lower_triangular():
    """Does the influence matrix of a causal model vanish above the diagonal?"""
    torch.manual_seed(1)
    model = textgen.ReferenceTinyGPT(7, d_model=16, num_heads=2, num_layers=1, n_ctx=6)
    infl = textgen.causal_influence(model, 6)
    assert infl.shape == (6, 6)
    assert float(infl.triu(diagonal=1).max()) < 1e-6
    assert float(torch.diagonal(infl).min()) > 0


def test_attention_memory_is_quadratic_and_skips_views():
    """Does doubling N quadruple what a plain attention allocates, while views count nothing?"""
    class Plain(nn.Module):
        def forward(self, x):
            return torch.softmax(x @ x.transpose(-2, -1), dim=-1) @ x

    class ViewOnly(nn.Module):
        def forward(self, x):
            return x.view(-1)[:3].unsqueeze(0).transpose(0, 1)

    rows = textgen.attention_memory(Plain(), [64, 128], d_model=8)
    assert rows[1][2] == 4 * rows[0][2] == 4 * 64 * 64 * 4    # float32 (N, N) scores
    assert textgen.attention_memory(ViewOnly(), [16], d_model=4)[0][1] == 0
    fig = textgen.plot_attention_memory(rows, rows)
    assert fig.axes[0].get_xlabel().startswith("sequence length")


def test_sampling_distribution_and_figures():
    """Do the Day 13 figures accept a generate function and a history dict?"""
    def greedy(model, idx, n, temperature=1.0, top_k=None, top_p=None, generator=None):
        logits = model(idx)[:, -1]
        return torch.cat([idx, logits.argmax(-1, keepdim=True)], dim=1)

    fig = textgen.plot_sampling_distribution(greedy, torch.tensor([0.0, 2.0, 1.0]),
                                             [{"temperature": 1.0}], draws=50)
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == [0.0, 1.0, 0.0]
    fig = textgen.plot_loss_curves({"step": [1, 2], "train_loss": [4.0, 3.0],
                                    "val_loss": [4.1, 3.2]})
    assert "loss" in fig.axes[0].get_ylabel()
    assert math.isclose(fig.axes[0].lines[-1].get_ydata()[0], math.log(65))


def test_show_side_by_side(capsys):
    """Are two samples printed as two aligned columns, long lines wrapped?"""
    textgen.show_side_by_side("ab\ncd", "x" * 12, ("before", "after"), width=5)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("before") and "| after" in lines[0]
    assert lines[2] == "ab    | xxxxx"
    assert lines[4] == "      | xx"


class _QKVAttention(nn.Module):
    """Day 12's contract: a fused qkv Linear(D, 3D), heads split from (B, T, D)."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.h, self.qkv = num_heads, nn.Linear(d_model, 3 * d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = (t.view(B, T, self.h, D // self.h).transpose(1, 2)
                   for t in self.qkv(x).split(D, dim=2))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(
            B, T, D)


class _Block(nn.Module):
    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d_model), _QKVAttention(d_model, num_heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.attn(self.ln1(x))


class _QKVGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(11, 16)
        self.blocks = nn.ModuleList([_Block(16, 2) for _ in range(2)])

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx)
        for block in self.blocks:
            x = block(x)
        return x


def test_attention_maps_read_both_kinds_of_tinygpt_and_leave_no_hook():
    """The learner's fused-qkv layout and the nn.TransformerEncoderLayer stand-in."""
    from course.heads import attention_maps, previous_token_scores

    torch.manual_seed(0)
    idx = torch.randint(0, 11, (2, 9))
    # the learner's layout: the maps equal softmax(q k^T / sqrt(d_k)) of the first block
    mine = _QKVGPT()
    maps = attention_maps(mine, idx)
    assert maps.shape == (2, 2, 9, 9)
    x = mine.blocks[0].ln1(mine.tok(idx[:1]))
    q, k, _ = mine.blocks[0].attn.qkv(x).split(16, dim=2)
    q, k = (t.view(1, 9, 2, 8).transpose(1, 2) for t in (q, k))
    mask = torch.ones(9, 9, dtype=torch.bool).tril()
    want = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~mask, -math.inf).softmax(-1)
    torch.testing.assert_close(maps[0], want[0].detach(), rtol=1e-4, atol=1e-6)
    # the stand-in: the maps equal nn.MultiheadAttention's own weights
    standin = textgen.ReferenceTinyGPT(11, d_model=16, num_heads=4, num_layers=2, n_ctx=9)
    maps = attention_maps(standin, idx)
    block = standin.blocks[0]
    h = block.norm1(standin.tok(idx) + standin.pos(torch.arange(9)))
    _, weights = block.self_attn(h, h, h, attn_mask=~mask, need_weights=True,
                                 average_attn_weights=False)
    torch.testing.assert_close(maps[0], weights[0].detach(), rtol=1e-4, atol=1e-6)
    assert not any(m._forward_pre_hooks for m in standin.modules())
    # a perfect previous-token head scores 1
    perfect = torch.zeros(1, 1, 9, 9)
    perfect[0, 0, 0, 0] = 1
    perfect[0, 0, torch.arange(1, 9), torch.arange(8)] = 1
    assert previous_token_scores(perfect).item() == 1.0
