"""Tests for course/widgets.py: the explorers run the learner's code, fast, in both modes."""

from __future__ import annotations

import math
import os

import matplotlib
import pytest
import torch
import torch.nn as nn

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from course import widgets as W  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)       # shared CI cores: spinning worker threads distort timings
    yield
    torch.set_num_threads(threads)
    plt.close("all")


class CharTokenizer:
    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    def encode(self, text: str) -> list[int]:
        return [self.index.get(c, 0) for c in text]

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)


def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
             generator=None):
    """A plain sampler with the Day 13 signature (written here, not taken from solutions)."""
    for _ in range(max_new_tokens):
        logits = model(idx[:, -model.n_ctx:])[:, -1] / temperature       # (B, V)
        if top_k:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, -math.inf)
        probs = torch.softmax(logits, dim=-1)
        if top_p:
            p, i = probs.sort(dim=-1, descending=True)
            p = p.masked_fill(p.cumsum(-1) - p > top_p, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, i, p)
        nxt = torch.multinomial(probs, 1, generator=generator)           # (B, 1)
        idx = torch.cat([idx, nxt], dim=1)
    return idx


class StoresWeights(nn.Module):
    """A Day 3/4-style module: keeps its weights in self.attn_weights (B, H, T, T)."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.d_model, self.heads = d, heads
        self.qk = nn.Linear(d, 2 * d)
        self.attn_weights = None

    def forward(self, x, mask=None):
        B, T, D = x.shape
        q, k = self.qk(x).view(B, T, 2, self.heads, D // self.heads).unbind(2)
        q, k = q.transpose(1, 2), k.transpose(1, 2)                     # (B, H, T, d)
        s = q @ k.transpose(-2, -1) / math.sqrt(D // self.heads)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        self.attn_weights = torch.exp(s - s.amax(-1, keepdim=True))
        self.attn_weights = self.attn_weights / self.attn_weights.sum(-1, keepdim=True)
        return x


def _images(fig):
    return [im for ax in fig.axes for im in ax.get_images()]


def _check_habits(fig) -> None:
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            continue
        assert ax.get_title(), "every panel has a title"
        assert ax.get_xlabel() and ax.get_ylabel(), "every panel labels its axes"
    for im in _images(fig):
        assert im.get_cmap().name in ("viridis", "cividis")


def test_scaling_explorer_static_uses_learner_softmax():
    """Does the static scaling figure call the learner's softmax, with titles and labels?"""
    calls = []

    def my_softmax(x, dim=-1):
        calls.append(x.shape)
        return torch.softmax(x, dim=dim)

    e = W.scaling_explorer(my_softmax, d_k=256, interactive=False)
    assert calls and e.widget is None and e.values == {"d_k": 256}
    _check_habits(e.figure)
    assert "√d_k = 16.0" in e.caption


def test_scaling_explorer_slider_redraws_quickly():
    """Does moving the d_k slider change the picture in well under a second?"""
    e = W.scaling_explorer(interactive=True)
    before = e._image.value
    e.controls["d_k"].value = 1024                  # what a user's drag does
    assert e.values["d_k"] == 1024 and e._image.value != before
    e.update(d_k=4)
    assert e.controls["d_k"].value == 4


def test_capture_attention_prefers_attn_weights_attribute():
    """Are weights stored in attn_weights (Days 3-4 convention) reported per head?"""
    m = StoresWeights()
    x = torch.randn(1, 5, 16)
    _, maps = W.capture_attention(m, x)
    assert len(maps) == 1 and maps[0][1].shape == (2, 5, 5)
    assert torch.allclose(maps[0][1], m.attn_weights[0])


def test_capture_attention_sees_fused_pytorch_layers():
    """Are nn.TransformerEncoderLayer's hidden weights recovered exactly?"""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    x = torch.randn(1, 4, 8)
    mask = torch.zeros(4, 4).masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1), -math.inf)
    _, maps = W.capture_attention(layer, x, src_mask=mask)
    _, expected = layer.self_attn(x, x, x, attn_mask=mask, need_weights=True,
                                  average_attn_weights=False)
    assert len(maps) == 1
    torch.testing.assert_close(maps[0][1], expected[0].detach(), rtol=1e-5, atol=1e-6)


def test_attention_explorer_text_layers_heads_and_caption():
    """Do the layer/head sliders and the text box drive the learner's module?"""
    class TwoLayers(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([StoresWeights(16, 2), StoresWeights(16, 2)])

        def forward(self, x, mask=None):
            for layer in self.layers:
                x = layer(x, mask)
            return x

    model = TwoLayers()
    e = W.attention_explorer(model, "the cat sat on the mat", mask="causal", interactive=True)
    assert e.controls["layer"].max == 1 and e.controls["head"].max == 1
    first = e._image.value
    e.controls["head"].value = 1
    assert e._image.value != first
    e.update(text="a dog barked", layer=1)
    assert "<b>dog</b> →" in e.caption
    weights = e.figure.axes[0].get_images()[0].get_array()
    assert weights.shape == (3, 3) and float(weights[0, 1]) == 0.0   # causal mask held


def test_attention_explorer_digits_static_without_frontend(monkeypatch):
    """Without a widget front end, does a classifier on digits give one static figure and a
    prediction?"""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setenv("COURSE_WIDGETS", "static")
    torch.manual_seed(0)

    class RowClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = nn.Linear(28, 16)
            self.enc = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True)
            self.out = nn.Linear(16, 10)

        def forward(self, x):
            return self.out(self.enc(self.inp(x)).mean(1))

    digits = torch.rand(3, 28, 28)
    e = W.attention_explorer(RowClassifier(), digits, [f"row {i}" for i in range(28)])
    assert not e.interactive and e.widget is None
    _check_habits(e.figure)
    assert "model prediction" in e.caption and "row 0" in e.caption
    e.update(example=2, head=3)
    assert e.values["head"] == 3


def test_positional_encoding_explorer_reads_module_buffer():
    """Does the PE explorer read a module's pe buffer (1, max_len, d) and show position 5?"""
    class PE(nn.Module):
        def __init__(self, d=16, n=50):
            super().__init__()
            pos = torch.arange(n).unsqueeze(1)
            div = 10000 ** (torch.arange(0, d, 2) / d)
            pe = torch.zeros(1, n, d)
            pe[0, :, 0::2], pe[0, :, 1::2] = torch.sin(pos / div), torch.cos(pos / div)
            self.register_buffer("pe", pe)

    e = W.positional_encoding_explorer(PE(), max_len=40, position=5, interactive=False)
    _check_habits(e.figure)
    assert _images(e.figure)[0].get_array().shape == (40, 16)
    e.update(dim=15, position=39)
    assert "Position 39" in e.caption


def test_positional_encoding_explorer_learned_module_from_zeros():
    """Does a learned PE (no buffer) work through its output on a zero input?"""
    class Learned(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(30, 8)

        def forward(self, x):
            return x + self.embedding(torch.arange(x.size(1)))

    e = W.positional_encoding_explorer(Learned(), max_len=30, interactive=True)
    e.controls["position"].value = 29
    assert e.values["position"] == 29


def test_sampling_explorer_bars_follow_temperature():
    """Does a low temperature concentrate the learner's draws on the likeliest token?"""
    from course.textgen import ReferenceTinyGPT

    text = "to be or not to be, that is the question\n"
    tok = CharTokenizer(text)
    torch.manual_seed(0)
    model = ReferenceTinyGPT(len(tok.chars), d_model=32, num_heads=2, num_layers=2, n_ctx=32)
    with torch.no_grad():
        model.head.weight.mul_(30.0)               # peaked logits, like a trained model's
    e = W.sampling_explorer(model, tok, generate, prompt="to be", max_new_tokens=20,
                            interactive=True)
    e.update(temperature=0.1)
    assert "1 different tokens" in e.caption or "2 different tokens" in e.caption
    hot = e.update(temperature=5.0, top_k=3)
    assert "3 different tokens" in e.caption
    ax = hot.axes[0]
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    e.update(top_k=0, top_p=0.05)
    assert "1 different tokens" in e.caption


def test_update_rejects_unknown_settings():
    """Does a typo in update() name the settings that exist?"""
    e = W.scaling_explorer(interactive=False)
    with pytest.raises(KeyError, match="d_k"):
        e.update(dk=8)


def test_frontend_detection(monkeypatch):
    """Is the static figure chosen under nbgrader, in CI and outside a kernel?"""
    monkeypatch.delenv("COURSE_WIDGETS", raising=False)
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    assert not W.interactive_frontend()
    monkeypatch.delenv("NBGRADER_EXECUTION")
    assert not W.interactive_frontend()             # pytest: no Jupyter kernel
    monkeypatch.setenv("COURSE_WIDGETS", "interactive")
    assert W.interactive_frontend()
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("COURSE_WIDGETS", "")
    assert not W.interactive_frontend()


def test_explorers_give_the_module_back_in_its_mode():
    """Does looking inside a model in training mode leave it in training mode?"""
    model = StoresWeights().train()
    W.attention_explorer(model, "a b c", interactive=False)
    assert model.training


def test_unknown_characters_in_a_typed_prompt_are_skipped():
    """Does a prompt with characters outside the vocabulary still sample (no crash)?"""
    from course.textgen import ReferenceTinyGPT

    class Strict(CharTokenizer):
        def encode(self, text):
            bad = sorted(set(text) - set(self.index))
            if bad:
                raise ValueError(f"characters not in the vocabulary: {bad}")
            return super().encode(text)

    tok = Strict("abc ")
    model = ReferenceTinyGPT(4, d_model=16, num_heads=2, num_layers=1, n_ctx=16)
    e = W.sampling_explorer(model, tok, generate, prompt="abc", max_new_tokens=5,
                            interactive=False)
    e.update(prompt="abz!c")
    assert e.caption.count("<pre") == 1


def test_token_classifier_with_padding_mask_per_example():
    """Day 7 style: does each example get its own padding mask and its own token labels?"""
    torch.manual_seed(0)

    class Classifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(16, 8)
            self.cls = nn.Parameter(torch.zeros(1, 1, 8))
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
            self.head = nn.Linear(8, 2)

        def forward(self, tokens, padding_mask):
            x = torch.cat([self.cls.expand(len(tokens), -1, -1), self.embed(tokens)], 1)
            keep = torch.cat([torch.ones(len(tokens), 1, dtype=torch.bool), padding_mask], 1)
            y, _ = self.attn(x, x, x, key_padding_mask=~keep)
            return self.head(y[:, 0])

    tokens = torch.tensor([[1, 5, 2, 0, 0], [7, 2, 9, 1, 4]])
    mask = tokens != 0
    names = {0: "·", 1: "A", 2: "B"}
    e = W.attention_explorer(Classifier(), tokens, mask=mask, classes=["B first", "A first"],
                             labels=lambda x: ["CLS"] + [names.get(int(t), str(int(t)))
                                                         for t in x[0]],
                             interactive=False)
    weights = _images(e.figure)[0].get_array()
    assert weights.shape == (6, 6) and float(weights[:, 4:].max()) == 0.0   # padding masked
    assert "<b>CLS</b>" in e.caption and "model prediction" in e.caption
    e.update(example=1)
    assert float(_images(e.figure)[0].get_array()[:, 4:].max()) > 0.0


def test_nothing_is_drawn_while_nbgrader_grades(tmp_path):
    """While nbgrader executes a notebook, do plots, explorers and the live monitor draw
    nothing, run nothing of the learner's and leave matplotlib unimported (its figures would
    never be shown: the grading kernel draws with the Agg backend)?"""
    import subprocess
    import sys

    code = """
import sys
import torch
from course import plots, textgen, training, widgets
calls = []
def softmax(x, dim=-1):
    calls.append(1)
    return torch.softmax(x, dim)
assert plots.plot_softmax_saturation(softmax) is None
assert plots.plot_attention(torch.eye(2), ["a", "b"]) is None
assert plots.plot_model_families() is None
assert textgen.plot_finetune({}, {}) is None
from course import heads
assert heads.plot_heads(torch.eye(3)[None, None], "abc", torch.ones(1, 1)) is None
assert widgets.scaling_explorer(softmax) is None
assert widgets.attention_explorer(lambda x: x, "a b") is None
assert textgen.plot_loss_curves({"train": [(0, 1.0)]}) is None
assert training.plot_digits(torch.zeros(2, 28, 28)) is None
monitor = training.LiveMonitor()
monitor.log(1, train_loss=1.0)
assert monitor.close() is None and monitor.history["train_loss"] == [(1.0, 1.0)]
assert not calls, "the learner's function ran"
assert "matplotlib" not in sys.modules, "matplotlib was imported"
print("ok")
"""
    env = {**os.environ, "NBGRADER_EXECUTION": "autograde"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_model_families_masks():
    """Encoder-only sees everything, decoder-only the past, encoder-decoder both in blocks."""
    from course.plots import family_masks, plot_model_families

    masks = family_masks(3, 2)
    assert bool(masks["encoder-only (BERT)"].all())
    gpt = masks["decoder-only (GPT)"]
    assert torch.equal(gpt, torch.ones(5, 5, dtype=torch.bool).tril())
    t5 = masks["encoder–decoder (T5)"]
    assert bool(t5[:3, :3].all()) and not bool(t5[:3, 3:].any())      # encoder: inputs only
    assert bool(t5[3:, :3].all())                                       # cross-attention
    assert torch.equal(t5[3:, 3:], torch.ones(2, 2, dtype=torch.bool).tril())
    assert plot_model_families() is not None


def test_the_benchmark_times_the_redraws(capsys):
    """The redraw times left the unit tests for `python -m autograder.benchmark --widgets`:
    does it time each explorer's redraw and print it (no bound asserted here)?"""
    from autograder.benchmark import widget_times

    times = widget_times(repeat=1)
    assert set(times) == {"scaling explorer, d_k", "positional explorer, position"}
    assert all(t > 0 for t in times.values())
    assert "median redraw" in capsys.readouterr().out
