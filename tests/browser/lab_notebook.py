"""The notebook the browser test opens: Day 2 as a learner finishes it, plus the explorers.

The Day 2 release notebook gets the answer-key code in its answer cells (as a learner who solved
the day would have), then one cell per explorer. Everything here runs in a second or two on a
CPU, so the whole notebook runs in the browser in well under a minute.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

DAY = "day02_queries_keys_values"

EXPLORER_CELLS = {
    "scaling": '''\
# Scaling explorer (Day 2): move d_k and watch YOUR softmax saturate without the 1/sqrt(d_k).
from course.widgets import scaling_explorer

scaling_explorer(softmax, d_k=64)''',
    "attention": '''\
# Attention explorer (Days 3, 4, 7, 11, 12): two untrained layers of two heads built on YOUR
# scaled_dot_product_attention. Type another sentence, move the layer and head sliders.
import torch.nn as nn

from course.widgets import attention_explorer


class AttentionLayer(nn.Module):
    def __init__(self, d_model: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.attn_weights = None

    def forward(self, x, mask=None):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        out, self.attn_weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T, d_k)
        return x + out.transpose(1, 2).reshape(B, T, D)                       # (B, T, D)


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([AttentionLayer(), AttentionLayer()])

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return x


torch.manual_seed(0)
attention_explorer(TwoLayers(), "the cat sat on the mat because it was tired", mask="causal")''',
    "positional": '''\
# Positional-encoding explorer (Day 5), here on a sinusoidal table built in this cell.
from course.widgets import positional_encoding_explorer

pos = torch.arange(64).unsqueeze(1)                            # (64, 1)
freq = 10000 ** (-torch.arange(0, 32, 2) / 32)                 # (16,)
pe = torch.zeros(64, 32)                                       # (positions, d_model)
pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
positional_encoding_explorer(pe, position=20, dim=4)''',
    "sampling": '''\
# Sampling explorer (Day 13): a tiny GPT trained for a few seconds on one line, and a sampler
# with the Day 13 signature written here.
import torch.nn.functional as F

from course.textgen import ReferenceTinyGPT
from course.widgets import sampling_explorer

text = "to be, or not to be, that is the question. " * 8


class CharTokenizer:
    def __init__(self, text):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    def encode(self, s):
        return [self.index[c] for c in s if c in self.index]

    def decode(self, ids):
        return "".join(self.chars[int(i)] for i in ids)


def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
             generator=None):
    for _ in range(max_new_tokens):
        logits = model(idx[:, -model.n_ctx:])[:, -1] / temperature          # (B, V)
        if top_k:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]                 # (B, 1)
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if top_p:
            p, order = probs.sort(dim=-1, descending=True)
            p = p.masked_fill(p.cumsum(-1) - p > top_p, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, p)
        idx = torch.cat([idx, torch.multinomial(probs, 1, generator=generator)], dim=1)
    return idx


tok = CharTokenizer(text)
data = torch.tensor(tok.encode(text))
torch.manual_seed(0)
gpt = ReferenceTinyGPT(len(tok.chars), d_model=48, num_heads=2, num_layers=2, n_ctx=24)
opt = torch.optim.AdamW(gpt.parameters(), lr=3e-3)
for step in range(80):
    starts = torch.randint(0, len(data) - 25, (16,))
    batch = torch.stack([data[s:s + 25] for s in starts])                  # (16, 25)
    loss = F.cross_entropy(gpt(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"training loss after 80 steps: {loss.item():.2f} nats per character")
sampling_explorer(gpt, tok, generate, prompt="to be, or ", max_new_tokens=40)''',
}


def build(root: Path, folder: Path) -> Path:
    """Write ``folder/<day>/<day>.ipynb`` (answers filled in, explorer cells appended)."""
    release = nbformat.read(str(root / "release" / DAY / f"{DAY}.ipynb"), as_version=4)
    answers = nbformat.read(str(root / "solutions" / DAY / f"{DAY}.ipynb"), as_version=4)
    solved = {c.id: c.source for c in answers.cells
              if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    for cell in release.cells:
        if cell.id in solved:
            cell.source = solved[cell.id]
    release.cells.append(nbformat.v4.new_markdown_cell(
        "## Explorers\nAdded by the browser test: each explorer runs the code above.",
        id="browser-explorers-md"))
    for name, source in EXPLORER_CELLS.items():
        release.cells.append(nbformat.v4.new_code_cell(source, id=f"browser-{name}"))
    out = folder / DAY / f"{DAY}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(release, str(out))
    return out
