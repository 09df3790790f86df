"""Small models the hidden tests hand to a learner's function, and that record what it did.

A test of ``train_one_epoch``, ``activation_stats`` or ``generate`` has to pass the learner's
function a model. In grading, that model must live where the learner's code runs (the
sandboxed kernel), while the test that judges it runs in a separate process (the judge, see
``autograder.judge``). So these classes are public, part of ``course``: the judge builds each
one here, sends its constructor arguments and its weights to the kernel, which builds the
same model (:func:`course.checking.twin`), and reads back what the learner's code did to it.

Nothing here is an answer to an exercise: each probe is a fixed, tiny network written with
PyTorch's own layers. Their weights are set by the judge, not by the constructors (the
``seed`` arguments only make a probe usable on its own). What a probe *records* (the modes
it ran in, the inputs it saw) is the kernel's word; the tests judge the weights and outputs
that come back, and treat a record as an observation (see ``course.checking.record``).

Letters in shape comments: B batch, T sequence length, V vocabulary, D width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course.checking import CheckFailure
from course.references import (  # noqa: F401 - the judge's references, made where checks use them
    ReferenceRNNForward,
    ReferenceSequenceClassifier,
    ReferenceSoftmax,
    reference_fit,
)

__all__ = ["ActivationProbe", "BatchQueue", "BrokenForward", "CachedLM", "ConstantLoss",
           "DropoutProbe", "FeedForwardBlock", "FixedLogits", "GlobalSwapped",
           "RepeatedBatch", "StepTable",
           "hook_count", "predict", "seeded", "seeded_generator", "step_schedule",
           "GradientProbe", "LogitsOnly", "Probe", "Recorder", "TrainingProbe"]


class Probe(nn.Module):
    """Base class: remembers its constructor arguments, so an equal twin can be built."""

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        object.__setattr__(self, "init_args", (args, kwargs))
        return self


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64)


class TrainingProbe(Probe):
    """``linear(tanh(x))`` in float64, recording ``training`` and grad mode at every call.

    Input (B, d_in) float64 -> logits (B, d_out) float64.
    """

    def __init__(self, d_in: int = 6, d_out: int = 3, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.linear = nn.Linear(d_in, d_out).double()
        with torch.no_grad():
            self.linear.weight.copy_(_randn(g, d_out, d_in))
            self.linear.bias.copy_(_randn(g, d_out))
        self.modes: list[bool] = []
        self.grad_enabled: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.modes.append(self.training)
        self.grad_enabled.append(torch.is_grad_enabled())
        return self.linear(torch.tanh(x))


class DropoutProbe(TrainingProbe):
    """:class:`TrainingProbe` with dropout (p = 0.5) before the linear layer."""

    def __init__(self, d_in: int = 6, d_out: int = 3, seed: int = 0) -> None:
        super().__init__(d_in, d_out, seed)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.modes.append(self.training)
        self.grad_enabled.append(torch.is_grad_enabled())
        return self.linear(self.dropout(torch.tanh(x)))


class GradientProbe(Probe):
    """``Linear(4, 3) -> Tanh -> Linear(3, 2, bias=False)`` plus an unused parameter ``extra``.

    Parameter names: ``net.0.weight``, ``net.0.bias``, ``net.2.weight``, ``extra``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2, bias=False))
        self.extra = nn.Parameter(torch.zeros(5))       # never used: its .grad stays None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class _PairOut(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2 + 1, x.argmax(-1)


class _IntOut(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.argmax(-1)


class ActivationProbe(Probe):
    """proj (Linear 6 -> 8), block (ReLU, LayerNorm), a module returning a tuple, and one
    returning integers: the cases a forward-hook recorder must handle. (..., 6) -> (..., 8)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 8)
        self.block = nn.Sequential(nn.ReLU(), nn.LayerNorm(8))
        self.pair = _PairOut()
        self.index = _IntOut()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.block(self.proj(x))
        h, _ = self.pair(h)
        self.index(h)
        return h


class FeedForwardBlock(nn.Module):
    """Day 6's feed-forward contract, ``linear1`` (d_model -> d_ff), GELU, ``linear2``:
    what Day 6's hidden tests put in a learner's layer in place of a FeedForward that failed
    its own test (the stand-in of Day 6 is not in Day 6's kernel). (..., d_model) ->
    (..., d_model). A learner's answer cell that reaches it earns nothing for its exercise
    (:func:`autograder.judge.internals_review`)."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(F.gelu(self.linear1(x)))


class FeedForwardProbe(Probe):
    """Two feed-forward blocks of Day 6's contract (``ffn1.linear1`` 6 -> 10 and
    ``ffn2.linear1`` 6 -> 8 feed a GELU) and a ``head`` Linear 6 -> 3 that feeds none.
    (..., 6) -> (..., 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.ffn1, self.ffn2 = FeedForwardBlock(6, 10), FeedForwardBlock(6, 8)
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.ffn2(x + self.ffn1(x)))


class BrokenForward(Probe):
    """A model whose forward pass raises ValueError after two submodules ran."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.act(self.proj(x))
        raise ValueError("forward failed on purpose (testing that hooks are removed)")


class FixedLogits(Probe):
    """A language model whose logits depend on the input token only: ``table[idx]``.

    idx (B, T) long -> logits (B, T, V) float32. Records ``training`` at every call.
    """

    def __init__(self, vocab_size: int = 9, n_ctx: int = 64) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(vocab_size, vocab_size))
        self.n_ctx = n_ctx
        self.modes: list[bool] = []

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        self.modes.append(self.training)
        return self.table[idx]                                       # (B, T, V)


class Recorder(Probe):
    """Fixed next-token logits at every position; records each input; refuses > n_ctx tokens.

    idx (B, T) long -> logits (B, T, V) float32.
    """

    def __init__(self, vocab_size: int = 6, n_ctx: int = 8) -> None:
        super().__init__()
        self.register_buffer("logits", torch.zeros(vocab_size, dtype=torch.float64))
        self.n_ctx = n_ctx
        self.inputs: list[torch.Tensor] = []

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        if idx.size(1) > self.n_ctx:
            raise CheckFailure(
                f"generate passed {idx.size(1)} tokens to a model with n_ctx = {self.n_ctx}: "
                "crop the context to the last n_ctx tokens, idx[:, -model.n_ctx:], before "
                "each forward pass.")
        self.inputs.append(idx.clone())
        b, n = idx.shape
        return self.logits.to(torch.float32).expand(b, n, -1).clone()   # (B, T, V)


class LogitsOnly(Probe):
    """Wraps a model whose forward returns ``(logits, cache)``; returns the logits only."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)[0]


class CachedLM(Probe):
    """A one-block causal language model with a key/value cache, in float64.

    Positions as sines of learned frequencies (any length), one attention layer (PyTorch's
    ``scaled_dot_product_attention``) with a residual, a linear head. ``forward(idx, cache)``
    takes idx (B, T) long and the cache of the previous call (``(k, v)``, each (B, H, S, D/H),
    or None) and returns (logits (B, T, V), new cache). Records the length of every input.
    """

    def __init__(self, vocab_size: int = 13, d_model: int = 16, num_heads: int = 2,
                 n_ctx: int = 64) -> None:
        super().__init__()
        self.d_model, self.num_heads, self.n_ctx = d_model, num_heads, n_ctx
        self.emb = nn.Parameter(torch.zeros(vocab_size, d_model, dtype=torch.float64))
        self.freq = nn.Parameter(torch.zeros(d_model, dtype=torch.float64))
        self.w_qkv = nn.Parameter(torch.zeros(3 * d_model, d_model, dtype=torch.float64))
        self.w_out = nn.Parameter(torch.zeros(vocab_size, d_model, dtype=torch.float64))
        self.fed: list[int] = []

    def forward(self, idx: torch.Tensor, cache=None):
        self.fed.append(idx.size(1))
        b, t = idx.shape
        past = 0 if cache is None else cache[0].size(2)
        pos = torch.arange(past, past + t, dtype=torch.float64)            # (T,)
        x = self.emb[idx] + torch.sin(pos[:, None] * self.freq)          # (B, T, D)
        q, k, v = (x @ self.w_qkv.T).split(self.d_model, 2)             # 3 x (B, T, D)
        # (B, T, D) -> (B, T, H, D/H) -> (B, H, T, D/H)
        q, k, v = (a.view(b, t, self.num_heads, -1).transpose(1, 2) for a in (q, k, v))
        if cache is not None:
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)  # (B, H, S, D/H)
        s = k.size(2)
        mask = torch.ones(t, s, dtype=torch.bool).tril(diagonal=s - t)       # (T, S)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)          # (B, H, T, D/H)
        y = y.transpose(1, 2).reshape(b, t, self.d_model) + x                # (B, T, D)
        return y @ self.w_out.T, (k, v)                                       # (B, T, V)


def step_schedule(optimizer: torch.optim.Optimizer, scheduler, steps: int) -> list[float]:
    """The learning rate of ``optimizer``'s first parameter group at steps 0 .. steps-1:
    read it, take an optimizer step, step the scheduler (the order a training loop uses)."""
    lrs = []
    for _ in range(steps):
        lrs.append(float(optimizer.param_groups[0]["lr"]))
        optimizer.step()
        scheduler.step()
    return lrs


class RepeatedBatch:
    """A loader that yields the same ``(inputs, labels)`` batch ``times`` times."""

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor, times: int) -> None:
        self.batch, self.times = (inputs, labels), times

    def __iter__(self):
        return iter([self.batch] * self.times)

    def __len__(self) -> int:
        return self.times


def seeded(seed: int, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with PyTorch's global generator seeded with ``seed``, leaving
    the caller's random state as it was (``torch.random.fork_rng``)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return fn(*args, **kwargs)


def hook_count(model: nn.Module) -> int:
    """How many forward and forward-pre hooks are registered on ``model``'s modules."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with ``seed``."""
    return torch.Generator().manual_seed(seed)


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``model(x)`` on the model's device, without gradients; the output back on the CPU.

    ``x`` is moved to the device of the model's first parameter (the CPU if it has none).
    """
    param = next(iter(model.parameters()), None)
    out = model(x.to(param.device) if param is not None else x)
    return out.cpu() if isinstance(out, torch.Tensor) else out


class GlobalSwapped:
    """``fn``, called with the global ``name`` it reads set to ``value`` for the call and put
    back afterwards (removed if it was not there). One mistake costs once: a learner's
    attention is graded with the course's softmax in place of theirs, which has its own test.

    ``GlobalSwapped(fn, {"get_lr": a, "get_batch": b})`` swaps several globals at once.
    A ``fn`` without ``__globals__`` (a callable object) is called as it is.
    """

    def __init__(self, fn, name, value=None) -> None:
        self.fn = fn
        self.values = dict(name) if isinstance(name, dict) else {name: value}

    def __call__(self, *args, **kwargs):
        globs = getattr(self.fn, "__globals__", None)
        if not isinstance(globs, dict):
            return self.fn(*args, **kwargs)
        missing = object()
        old = {name: globs.get(name, missing) for name in self.values}
        globs.update(self.values)
        try:
            return self.fn(*args, **kwargs)
        finally:
            for name, value in old.items():
                if value is missing:
                    globs.pop(name, None)
                else:
                    globs[name] = value


class StepTable:
    """``get_lr(step, ...)`` answered from a table of rates the judge computed: what it puts
    in the place of a learner's ``get_lr`` while it grades ``train``, so a wrong schedule
    costs the schedule's test alone. Steps outside the table raise IndexError."""

    def __init__(self, rates: list[float]) -> None:
        self.rates = [float(r) for r in rates]

    def __call__(self, step: int, *args, **kwargs) -> float:
        return self.rates[int(step)]


class BatchQueue:
    """``get_batch(...)`` that returns copies of the judge's ``batches`` (a list of ``(x, y)``
    pairs) in turn, from the first again after the last: in the place of a learner's
    ``get_batch`` while ``train`` is graded."""

    def __init__(self, batches: list) -> None:
        self.batches, self.next = [(x, y) for x, y in batches], 0

    def __call__(self, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.batches[self.next % len(self.batches)]
        self.next += 1
        return x.clone(), y.clone()


class ConstantLoss:
    """``estimate_loss(...)`` that returns ``value`` without touching the model: in the place
    of a learner's ``estimate_loss`` while ``train`` is graded (only the weights are)."""

    def __init__(self, value: float) -> None:
        self.value = float(value)

    def __call__(self, *args, **kwargs) -> float:
        return self.value
