"""Unit tests of course.standins: the stand-ins equal PyTorch's own modules."""

from __future__ import annotations

import torch
from torch import nn

from course import standins


def _copy_attention(mine: standins.MultiHeadSelfAttention, ref: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mine.W_Q.weight, mine.W_K.weight, mine.W_V.weight]))
        ref.in_proj_bias.copy_(torch.cat([mine.W_Q.bias, mine.W_K.bias, mine.W_V.bias]))
        ref.out_proj.weight.copy_(mine.W_O.weight)
        ref.out_proj.bias.copy_(mine.W_O.bias)


def test_attention_equals_nn_multiheadattention():
    """Does the stand-in attention equal nn.MultiheadAttention, with a mask, weights per head?"""
    torch.manual_seed(0)
    mine = standins.MultiHeadSelfAttention(12, 3).double()
    ref = nn.MultiheadAttention(12, 3, batch_first=True).double()
    _copy_attention(mine, ref)
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    out = mine(x, mask)
    expected, weights = ref(x, x, x, attn_mask=~mask, average_attn_weights=False)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(mine.attn_weights, weights)
    assert sum(p.numel() for p in standins.MultiHeadSelfAttention(128, 8).parameters()) == 66_048


def test_attention_rejects_indivisible_heads():
    """Does d_model=10 with 3 heads raise a ValueError naming both numbers?"""
    try:
        standins.MultiHeadSelfAttention(10, 3)
    except ValueError as exc:
        assert "10" in str(exc) and "3" in str(exc)
    else:
        raise AssertionError("no ValueError")


def test_sinusoidal_table_and_buffer():
    """Is pe a (1, max_len, d_model) buffer with sin on even and cos on odd columns?"""
    pe = standins.SinusoidalPositionalEncoding(16, 50)
    assert "pe" in dict(pe.named_buffers()) and not list(pe.parameters())
    pos = torch.arange(50.0)[:, None]
    freq = 10000 ** (torch.arange(0, 16, 2.0) / 16)
    assert pe.pe.shape == (1, 50, 16)
    torch.testing.assert_close(pe.pe[0, :, 0::2], torch.sin(pos / freq))
    torch.testing.assert_close(pe.pe[0, :, 1::2], torch.cos(pos / freq))
    x = torch.zeros(2, 7, 16)
    torch.testing.assert_close(pe(x), pe.pe[:, :7].expand(2, 7, 16))


def test_sinusoidal_too_long_raises():
    """Does a sequence longer than max_len raise a ValueError naming both lengths?"""
    pe = standins.SinusoidalPositionalEncoding(8, 4)
    try:
        pe(torch.zeros(1, 6, 8))
    except ValueError as exc:
        assert "6" in str(exc) and "4" in str(exc)
    else:
        raise AssertionError("no ValueError")


def test_encoder_layer_equals_torch():
    """Does the stand-in layer equal nn.TransformerEncoderLayer (Pre-LN, GELU) given its weights?"""
    torch.manual_seed(1)
    layer = standins.TransformerEncoderLayer(16, 4, 32).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ref = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation="gelu",
                                     batch_first=True, norm_first=True).double()
    _copy_attention(layer.attn, ref.self_attn)
    ref.linear1.load_state_dict(layer.ffn.linear1.state_dict())
    ref.linear2.load_state_dict(layer.ffn.linear2.state_dict())
    ref.norm1.load_state_dict(layer.norm1.state_dict())
    ref.norm2.load_state_dict(layer.norm2.state_dict())
    x = torch.randn(3, 7, 16, dtype=torch.float64)
    torch.testing.assert_close(layer(x), ref(x))
    assert sum(p.numel() for p in standins.TransformerEncoderLayer(128, 8, 512).parameters()) \
        == 198_272


def test_sdpa_weights_rows_sum_to_one():
    """Does the Day 2 stand-in return weights that sum to 1 and equal PyTorch's output?"""
    g = torch.Generator().manual_seed(2)
    Q = torch.randn(2, 4, 8, generator=g, dtype=torch.float64)
    K = torch.randn(2, 6, 8, generator=g, dtype=torch.float64)
    V = torch.randn(2, 6, 5, generator=g, dtype=torch.float64)
    out, w = standins.scaled_dot_product_attention(Q, K, V)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, dtype=torch.float64))
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(Q, K, V))


def test_days_8_and_9_are_registered_without_course_training(fresh_python):
    """Are the Day 8/9 stand-ins and their self-checks known to load_previous by importing
    course.previous alone (no import-time side effect of another module)?"""
    code = (
        "import sys\n"
        "from course import previous, standins\n"
        "assert 'course.training' not in sys.modules\n"
        "for day, name in [('day08_mnist_as_sequences', 'SequenceClassifier'),\n"
        "                  ('day09_training_loop', 'train_one_epoch'),\n"
        "                  ('day09_training_loop', 'evaluate'),\n"
        "                  ('day09_training_loop', 'warmup_cosine_schedule')]:\n"
        "    assert name in standins.STANDINS[day], (day, name)\n"
        "    assert (day, name) in previous.SELF_CHECKS, (day, name)\n"
        "print('ok')\n")
    out = fresh_python(code)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_day8_health_check_states_the_parameter_count_the_model_has():
    """Day 8 prints its model's parameter count next to a health-check number: is that number
    the count of the course's SequenceClassifier with the notebook's own arguments?"""
    import re
    from pathlib import Path

    import nbformat

    from course.standins import SequenceClassifier

    day = "day08_mnist_as_sequences"
    root = Path(__file__).resolve().parents[1]
    nb = nbformat.read(str(root / "source" / day / f"{day}.ipynb"), as_version=4)
    cell = next(c.source for c in nb.cells if "(health check: " in c.source
                and "num_params" in c.source)
    stated = int(re.search(r"\(health check: ([\d,]+)\)", cell).group(1).replace(",", ""))
    args = re.search(r"SequenceClassifier\((.*?)\)\n", cell, re.S).group(1)
    model = eval(f"SequenceClassifier({args})", {"SequenceClassifier": SequenceClassifier})
    assert sum(p.numel() for p in model.parameters()) == stated
