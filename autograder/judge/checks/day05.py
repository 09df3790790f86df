"""Hidden tests of Day 5: sinusoidal and learned positional encodings.

The expected table is the formula of Vaswani et al. (2017, section 3.5) evaluated in float64;
the classic mistakes (sin and cos swapped, exponent i/d instead of 2i/d) are evaluated the same
way to name the one a learner made.
"""

from __future__ import annotations

import torch
from torch import nn

from autograder.judge.checks import (
    CheckFailure,
    call,
    compare,
    expect_module,
    expect_tensor,
    expect_unchanged,
    inject,
    manual_seed,
    observed_check,
    rng,
    shown,
    value_check,
)
from course.device import check_runs_on_any_device


def _formula(max_len: int, d_model: int, swap: bool = False, exponent: str = "2i") -> torch.Tensor:
    """(max_len, d_model) table in float64; columns beyond d_model are dropped."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]             # (max_len, 1)
    pairs = (d_model + 1) // 2
    i = torch.arange(pairs, dtype=torch.float64)
    power = 2 * i / d_model if exponent == "2i" else i / d_model
    angle = pos / torch.pow(10000.0, power)                               # (max_len, pairs)
    first, second = (torch.cos(angle), torch.sin(angle)) if swap else (torch.sin(angle),
                                                                       torch.cos(angle))
    table = torch.stack([first, second], dim=-1).reshape(max_len, 2 * pairs)
    return table[:, :d_model]


def _pe_tensor(module: nn.Module, max_len: int, d_model: int) -> torch.Tensor:
    pe = getattr(module, "pe", None)
    return expect_tensor(pe, "self.pe", shape=(1, max_len, d_model))


@observed_check
def check_pe_buffer(SinusoidalPositionalEncoding) -> None:
    """pe is a registered buffer (1, max_len, d_model): not a parameter, saved in state_dict."""
    m = expect_module(SinusoidalPositionalEncoding, 12, 40)
    params = dict(m.named_parameters())
    if "pe" in params:
        raise CheckFailure(
            "self.pe is an nn.Parameter: the optimizer would train the fixed sine table and "
            "model.parameters() counts it. Register it with self.register_buffer('pe', table) "
            "instead: not trained, but saved and moved by .to(device).")
    if params:
        raise CheckFailure(f"SinusoidalPositionalEncoding should have no trainable parameters, "
                           f"found {sorted(params)}.")
    if "pe" not in dict(m.named_buffers()):
        raise CheckFailure(
            "self.pe is a plain tensor attribute, not a registered buffer: .to(device) will "
            "not move it and state_dict() will not save it. Use "
            "self.register_buffer('pe', table).")
    _pe_tensor(m, 40, 12)
    if "pe" not in m.state_dict():
        raise CheckFailure("self.pe is a non-persistent buffer; register it with the default "
                           "persistent=True so it is saved with the model.")


@value_check
def check_pe_values(SinusoidalPositionalEncoding) -> None:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), d_model=10, max_len=60."""
    m = expect_module(SinusoidalPositionalEncoding, 10, 60)
    pe = _pe_tensor(m, 60, 10)[0]
    expect_tensor(pe, "self.pe", dtype=torch.float32)
    mistakes = {
        "sin and cos are swapped: even columns (0, 2, ...) are sin, odd columns are cos":
            _formula(60, 10, swap=True),
        "the exponent should be 2i/d_model (2i = the even column index), not i/d_model":
            _formula(60, 10, exponent="i"),
    }
    compare(pe, _formula(60, 10).float(), "self.pe[0] (positions x columns)", mistakes,
            rtol=1e-5, atol=1e-5, hint="position 0 must be [0, 1, 0, 1, ...]: sin(0) in the "
            "even columns, cos(0) in the odd ones.")


@value_check
def check_pe_forward(SinusoidalPositionalEncoding) -> None:
    """forward(x) = x + pe[:, :seq_len] for seq_len=7 < max_len=30, a batch of 3."""
    m = expect_module(SinusoidalPositionalEncoding, 6, 30)
    x = torch.randn(3, 7, 6, generator=rng(50))
    try:
        out = call(m, x, name="SinusoidalPositionalEncoding.forward(x)")
    except CheckFailure as exc:
        if "must match the size" in str(exc):
            raise CheckFailure(
                f"{exc}\nHint: self.pe has max_len=30 positions but x has seq_len=7: add only "
                "the first seq_len rows, x + self.pe[:, :seq_len].") from None
        raise
    expect_tensor(out, "forward(x) for x of shape (3, 7, 6)", shape=(3, 7, 6),
                  dtype=torch.float32)
    # Then with a table of the judge's own in self.pe: forward must add its first 7 rows.
    _pe_tensor(m, 30, 6)
    pe = inject(m, {"pe": torch.randn(1, 30, 6, generator=rng(55))})["pe"]
    out = call(m, x, name="SinusoidalPositionalEncoding.forward(x)")
    compare(out, x + pe[:, :7], "forward(x)", {
        "you returned the encoding without x: return x + self.pe[:, :seq_len]":
            pe[:, :7].expand(3, 7, 6),
    }, rtol=1e-6, atol=1e-6)


@observed_check
def check_pe_errors(SinusoidalPositionalEncoding) -> None:
    """seq_len > max_len raises a ValueError naming both; odd d_model works or raises ValueError."""
    m = expect_module(SinusoidalPositionalEncoding, 4, 8)
    try:
        with torch.no_grad():
            m(torch.zeros(1, 11, 4))
    except ValueError as exc:
        if "11" not in str(exc) or "8" not in str(exc):
            raise CheckFailure(f"forward on 11 positions with max_len=8 raised ValueError, but "
                               f"its message {shown(str(exc))} should name both 11 and "
                               "8.") from None
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything: diagnosed
        raise CheckFailure(f"forward on 11 positions with max_len=8 raised "
                           f"{type(exc).__name__}: {exc}. Check seq_len against self.max_len "
                           "and raise a ValueError naming both numbers.") from None
    else:
        raise CheckFailure("forward on 11 positions with max_len=8 should raise ValueError "
                           "naming both numbers: the table has only 8 rows.")
    try:
        odd = SinusoidalPositionalEncoding(7, 9)
    except ValueError:
        return
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything: diagnosed
        raise CheckFailure(f"SinusoidalPositionalEncoding(7, 9) raised {type(exc).__name__}: "
                           f"{exc}. An odd d_model must either work (the last sin column has no "
                           "cos partner) or raise a clear ValueError.") from None
    compare(_pe_tensor(odd, 9, 7)[0], _formula(9, 7).float(), "self.pe[0] for d_model=7",
            rtol=1e-5, atol=1e-5)


@observed_check
def check_pe_device(SinusoidalPositionalEncoding) -> None:
    """Runs on another device (GPU, or PyTorch's meta device): pe must move with the module."""
    m = expect_module(SinusoidalPositionalEncoding, 8, 16)
    check_runs_on_any_device(m, lambda: (torch.randn(2, 5, 8, generator=rng(51)),),
                             "SinusoidalPositionalEncoding")


@value_check
def check_learned(LearnedPositionalEncoding) -> None:
    """nn.Embedding(max_len, d_model) table; forward = x + rows 0..T-1; runs on any device."""
    manual_seed(52)
    m = expect_module(LearnedPositionalEncoding, 6, 25)
    emb = getattr(m, "embedding", None)
    if not isinstance(emb, nn.Embedding) or tuple(emb.weight.shape) != (25, 6):
        raise CheckFailure("self.embedding should be nn.Embedding(max_len, d_model) = "
                           f"nn.Embedding(25, 6), got {shown(emb)}.")
    n = sum(p.numel() for p in m.parameters())
    if n != 150:
        raise CheckFailure(f"LearnedPositionalEncoding(6, 25) has {n} parameters, expected "
                           "150 (one 6-vector per position).")
    x = torch.randn(2, 9, 6, generator=rng(53))
    table = inject(m, {"embedding.weight": torch.randn(25, 6, generator=rng(56))})
    out = call(m, x, name="LearnedPositionalEncoding.forward(x)")
    expect_tensor(out, "forward(x)", shape=(2, 9, 6))
    compare(out, x + table["embedding.weight"][:9], "forward(x)",
            {"the positions start at 1: positions start at 0, so the first token takes row 0 "
             "of the table (torch.arange(T))": x + table["embedding.weight"][1:10]},
            rtol=1e-6, atol=1e-6)
    expect_unchanged(m, table)
    check_runs_on_any_device(m, lambda: (torch.randn(2, 4, 6, generator=rng(54)),),
                             "LearnedPositionalEncoding")
