"""The judge's parts without a kernel: the wire format, the agent behind a direct transport,
the parsing of hidden cells, the gate and the static review."""

from __future__ import annotations

import base64
import json
import sys

import pytest
import torch

from autograder import judge
from autograder.judge import remote
from course import agent, checking, wire


def test_wire_round_trips_values_and_keeps_no_pickle():
    """Do tensors of every dtype, sizes, slices and containers cross both ways unchanged?"""
    values = [torch.randn(2, 3, dtype=torch.float64), torch.arange(5), torch.tensor([True]),
              torch.randn(4).to(torch.bfloat16), torch.empty(0, 3), torch.Size([2, 3]),
              torch.float32, slice(1, None, 2), Ellipsis, float("nan"), {"a": (1, [2.5])}]
    for v in values:
        back = wire.decode(wire.loads(wire.dumps(wire.encode(v))))
        if isinstance(v, torch.Tensor):
            assert type(back) is torch.Tensor and back.dtype == v.dtype
            assert torch.equal(back, v)
        elif isinstance(v, float):
            assert back != back
        else:
            assert back == v


@pytest.mark.parametrize("bad", [
    {"$t": ["float64", [2, 2], base64.b64encode(b"x" * 8).decode()]},   # too few bytes
    {"$t": ["object", [1], ""]},                                       # unknown dtype
    {"$t": ["float32", [-1], ""]},                                     # negative size
    {"$q": 1},                                                         # unknown tag
    {"$r": 1, "cls": "not a list", "kind": "x"},                       # malformed reference
    {"$d": [["k"]]},                                                   # malformed dict
])
def test_wire_rejects_malformed_values(bad):
    """Is every malformed encoding refused with a WireError (never half-decoded)?"""
    with pytest.raises(wire.WireError):
        wire.decode(bad)


def test_wire_refuses_oversized_and_non_json_replies():
    with pytest.raises(wire.WireError):
        wire.loads("[" * 10 + "]" * 10 + " " * (wire.MAX_REPLY + 1))
    with pytest.raises(wire.WireError):
        wire.loads("NaN")
    with pytest.raises(wire.WireError):
        wire.encode(object())


def _conn(ns: dict) -> remote.Conn:
    agent.reset()
    agent.USER_NS = ns
    return remote.Conn(agent.handle)


def test_proxies_behave_like_the_learner_objects():
    """Calls, attributes, isinstance, identity, iteration and torch functions on a module
    that lives behind the agent."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x):
            return self.lin(x)

    conn = _conn({"Net": Net})
    net = conn.get("Net")()
    assert isinstance(net, torch.nn.Module) and not isinstance(net, torch.nn.Linear)
    assert isinstance(net.lin, torch.nn.Linear) and net.lin.in_features == 3
    assert net.lin is net.lin  # one proxy per kernel object
    assert sum(p.numel() for p in net.parameters()) == 8
    x = torch.randn(4, 3)
    with torch.no_grad():
        out = net(x)
    assert type(out) is checking.KernelTensor  # no graph: by value, marked as the kernel's
    expected = torch.nn.functional.linear(x, net.lin.weight, net.lin.bias)  # fetched by value
    assert torch.allclose(out, expected)
    assert checking.from_kernel(expected)  # computed from the kernel's weights: still marked
    y = net(x)  # with a graph: stays in the kernel, backward runs there
    y.sum().backward()
    assert net.lin.bias.grad.tolist() == [4.0, 4.0]


def test_learner_errors_come_back_as_errors():
    def stub(x):
        raise NotImplementedError()

    conn = _conn({"stub": stub})
    with pytest.raises(NotImplementedError):
        conn.get("stub")(torch.ones(1))
    with pytest.raises(NameError):
        conn.get("missing")


def test_a_lying_kernel_fails_the_check_not_the_judge():
    """An agent replaced by one that answers garbage, or with the wrong values, earns 0."""
    from autograder.judge.checks import day02

    call = judge.HiddenCall("autograder.judge.checks.day02", "check_softmax_values",
                            [("name", "softmax")])
    for answer in ("not base64!", base64.b64encode(b"{bad json").decode(),
                   base64.b64encode(json.dumps({"$t": ["float32", [1], ""]}).encode()).decode()):
        v = judge.run(call, remote.Conn(lambda _req, a=answer: a))
        assert not v.passed and ("format" in v.message or "should be" in v.message), v.message
    zeros = _conn({"softmax": lambda x, dim=-1: torch.zeros_like(x)})
    v = judge.run(call, zeros)
    assert not v.passed and "differs" in v.message
    assert day02  # imported from the course, never from the kernel


def test_parse_hidden_cell_accepts_one_check_call_only():
    src = ("# Hidden tests: x\n### BEGIN HIDDEN TESTS\n"
           "from autograder.judge.checks import day03 as hidden\n"
           "hidden.check_mask(SelfAttention, 3, mode='x')\n### END HIDDEN TESTS\n")
    call = judge.parse_hidden_cell(src)
    assert (call.module, call.function) == ("autograder.judge.checks.day03", "check_mask")
    assert call.args == [("name", "SelfAttention"), ("const", 3)]
    assert call.kwargs == {"mode": ("const", "x")} and call.names == ["SelfAttention"]
    for bad in ("import os\nos.system('x')", "from autograder.judge.checks import day03 as h\n"
                "h.check_mask(f(x))", "x = 1"):
        with pytest.raises(judge.NotJudgeable):
            judge.parse_hidden_cell(bad)


def test_an_expected_value_from_the_kernel_is_a_grader_bug():
    """compare refuses an expected value computed from what the kernel reports, and an
    in-place copy of it into the judge's own tensor; the judge says it is the grader's fault."""
    from autograder.judge import checks

    conn = _conn({"lin": torch.nn.Linear(3, 2)})
    lin = conn.get("lin")
    x = torch.randn(4, 3)
    with torch.no_grad():
        out = lin(x)
        expected = torch.nn.functional.linear(x, lin.weight, lin.bias)
    with pytest.raises(checking.GraderBug):
        checks.compare(out, expected, "output")
    with pytest.raises(checking.GraderBug), torch.no_grad():
        torch.zeros(2, 3).copy_(lin.weight)
    checks.compare(out, checking.trusted(expected), "output")   # on purpose, explicitly

    # The same, as a check the judge runs: "internal error of the grader".
    import types

    module = types.ModuleType("autograder.judge.checks.bogus")

    @checks.value_check
    def check_reads_back(lin):
        with torch.no_grad():
            checks.compare(lin(x), torch.nn.functional.linear(x, lin.weight, lin.bias), "y")

    module.check_reads_back = check_reads_back
    sys.modules[module.__name__] = module
    try:
        v = judge.run(judge.HiddenCall(module.__name__, "check_reads_back",
                                       [("name", "lin")]), conn)
    finally:
        del sys.modules[module.__name__]
    assert not v.passed and v.internal and "internal error of the grader" in v.message


def test_every_check_declares_its_kind():
    import importlib
    import pkgutil

    import autograder.judge.checks as package

    missing = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"autograder.judge.checks.{info.name}")
        for name in dir(module):
            fn = getattr(module, name)
            if name.startswith("check_") and callable(fn) and fn.__module__ == module.__name__ \
                    and getattr(fn, "kind", None) not in ("value", "observed"):
                missing.append(f"{info.name}.{name}")
    assert not missing, missing


def test_kernel_answers_are_bounded():
    """A value on a reference that is not a tensor's is refused, and one test may not receive
    more than its budget."""
    from course import wire

    with pytest.raises(wire.WireError):
        wire.decode({"$r": 1, "cls": ["x.Module"], "kind": "module",
                     "v": wire.encode(torch.zeros(3))})
    conn = _conn({"big": torch.zeros(300_000)})
    conn.test_limit = 1_000_000
    with pytest.raises(remote.JudgeError, match="more than"):
        for _ in range(3):
            conn.get("big")


def test_gate_withholds_observed_checks_of_failed_names():
    V = judge.Verdict
    verdicts = {"values": V(False, "differs", ["SelfAttention"], "value"),
                "device": V(True, "", ["SelfAttention"], "observed"),
                "other": V(True, "", ["FeedForward"], "observed")}
    unpaid = judge.gate(verdicts)
    assert list(unpaid) == ["device"] and "values" in unpaid["device"]
    # in the learner's terms (issue 48, item 6), not the grader's
    assert "count once `SelfAttention` is right" in unpaid["device"]
    assert "kernel's word" not in unpaid["device"]


def test_gate_withholds_an_observed_check_only_for_the_value_checks_it_leans_on():
    """Does a wrong top-p leave the crop test of the same generate paid, while a wrong plain
    sampler still withholds it?"""
    V = judge.Verdict
    crop = V(True, "", ["generate"], "observed", check="check_generate_crop",
             leans_on=["check_generate_temperature"])
    top_p = V(False, "differs", ["generate"], "value", check="check_generate_top_p")
    plain = V(True, "", ["generate"], "value", check="check_generate_temperature")
    assert judge.gate({"crop": crop, "top_p": top_p, "plain": plain}) == {}
    plain_wrong = V(False, "differs", ["generate"], "value", check="check_generate_temperature")
    assert list(judge.gate({"crop": crop, "top_p": top_p, "plain": plain_wrong})) == ["crop"]


@pytest.mark.parametrize("module, check", [("day13_sampling", "check_generate_crop"),
                                           ("day08", "check_init_loss"),
                                           ("day08", "check_classifier_device")])
def test_an_observed_check_leans_on_value_checks_that_exist(module, check):
    import importlib

    checks = importlib.import_module(f"autograder.judge.checks.{module}")
    fn = getattr(checks, check)
    assert fn.kind == "observed" and fn.leans_on
    assert all(callable(getattr(checks, name, None)) and getattr(checks, name).kind == "value"
               for name in fn.leans_on)


def test_static_review_flags_the_builtin_not_the_learner_function():
    own = ["def softmax(x, dim=-1):\n    e = (x - x.max(dim, keepdim=True).values).exp()\n"
           "    return e / e.sum(dim, keepdim=True)\n",
           "y = softmax(z)  # my own\n"]
    assert judge.static_review(own, ["torch.softmax", "torch.Tensor.softmax"]) == []
    cheat = ["def softmax(x, dim=-1):\n    return x.softmax(dim)\n",
             "f = getattr(torch, 'soft' + 'max')\n",
             "from torch.nn.functional import softmax as sm\n"]
    found = judge.static_review(cheat, ["torch.softmax", "torch.Tensor.softmax"])
    assert len(found) == 3, found


@pytest.mark.parametrize("route", [
    "    return torch._softmax(x, dim, False)",              # scored 8/8 unflagged before
    "    return torch.ops.aten._softmax(x, dim, False)",
    "    return torch.special.softmax(x, dim)",
    "    return F.log_softmax(x, dim).exp()",
    "    f = getattr(torch, 'softmax')",
    "    sm = torch.nn.functional.softmax",
    "from torch.special import *",
    "    return torch._C._nn.softmax(x, dim)",
    "    fn = sys.modules['torch'].softmax",
])
def test_static_review_sees_the_routes_to_a_forbidden_builtin(route):
    found = judge.static_review([f"def softmax(x, dim=-1):\n{route}\n"],
                                ["torch.softmax", "torch.Tensor.softmax"])
    assert len(found) == 1 and "line 2" in found[0], found


def test_twin_and_in_kernel_make_the_checks_objects_where_the_learner_code_runs():
    """A probe made in the kernel carries the judge's weights, gradients and mode; an
    optimizer made over its parameters steps the kernel's copy, not the judge's."""
    from course import checking, probes

    conn = _conn({})
    with checking.judging(checking.JudgeContext(make=conn.make)):
        local = probes.TrainingProbe(seed=3).eval()
        with torch.no_grad():
            local.linear.weight.mul_(2.0)
        local.linear.bias.grad = torch.ones(3, dtype=torch.float64)
        model = checking.twin(local)
        assert type(model) is remote.Proxy and isinstance(model, torch.nn.Module)
        kernel_obj = next(o for o in agent._objects.values()
                          if isinstance(o, probes.TrainingProbe))
        assert kernel_obj is not local and not kernel_obj.training
        assert torch.equal(kernel_obj.linear.weight, local.linear.weight)
        assert torch.equal(kernel_obj.linear.bias.grad, local.linear.bias.grad)
        opt = checking.in_kernel(torch.optim.SGD, model.parameters(), lr=0.5)
        opt.step()
        assert torch.equal(kernel_obj.linear.bias, local.linear.bias - 0.5)
        g = checking.generator(7)
        assert torch.equal(torch.randint(10, (5,), generator=agent._objects[g._ref.id]),
                           torch.randint(10, (5,), generator=torch.Generator().manual_seed(7)))


@pytest.mark.parametrize("path", ["os.system", "builtins.eval", "subprocess.run",
                                  "course.probes._PairOut", "course.agent.handle",
                                  "torch.nn.Module.__subclasses__", "torch.load"])
def test_the_kernel_makes_only_public_course_and_torch_objects(path):
    """Is a request to make anything else refused (a PermissionError, sent back as data)?"""
    conn = _conn({})
    with pytest.raises(Exception) as info:
        conn.request({"op": "make", "path": path})
    assert "may not make" in str(info.value)


def test_training_result_numbers_the_characters_the_way_the_learner_trained():
    """Does the Day 13 judge number the validation windows with the learner's tokenizer when
    its ids are a permutation (first-appearance order), and fall back to sorted order when
    they are not a bijection or encode fails?"""
    from autograder.judge.checks import day13

    chars = ["\n", " ", "a", "b"]

    class Tok:
        def __init__(self, order):
            self.order = order

        def encode(self, s):
            return [self.order.index(c) for c in s]

    first_seen = ["b", "a", " ", "\n"]
    assert day13._learner_numbering(Tok(first_seen), chars) == {"\n": 3, " ": 2, "a": 1,
                                                                 "b": 0}
    sorted_ids = {c: i for i, c in enumerate(chars)}
    assert day13._learner_numbering(None, chars) == sorted_ids

    class Broken:
        def encode(self, s):
            return [0 for _ in s]

    class Raises:
        def encode(self, s):
            raise KeyError(s[0])

    assert day13._learner_numbering(Broken(), chars) == sorted_ids
    assert day13._learner_numbering(Raises(), chars) == sorted_ids


SELF_ATTENTION = """
import math, torch, torch.nn as nn
class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.d_model = d_model
        self.W_Q, self.W_K, self.W_V = (nn.Linear(d_model, d_model) for _ in range(3))
        self.attn_weights = None
    def forward(self, x, mask=None):
        Q, K, V = self.W_Q(x), self.W_K(x), self.W_V(x)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_model)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        self.attn_weights = torch.softmax(scores, dim=-1)
        return self.attn_weights @ V
"""


@pytest.mark.parametrize("lie, says", [
    ("{k: 'a tensor' for k in nn.Module.state_dict(self)}", "is not a tensor"),
    ("{1: v for v in nn.Module.state_dict(self).values()}", "has no parameter"),
    ("type('D', (), {'items': lambda d: [('W_Q.weight',)]})()", "ValueError"),
    ("None", "AttributeError"),
])
def test_a_state_dict_that_lies_fails_the_check_it_feeds(lie, says):
    """The judge reads a kernel module's state_dict in one request (names and shapes for its
    injection, values for "forward left the weights alone"): a state_dict that answers
    something else fails the check with a message, never passes it or breaks the judge."""
    ns: dict = {"__name__": "learner"}
    exec(SELF_ATTENTION, ns)  # noqa: S102 - learner code written in this test
    right = judge.run(judge.HiddenCall("autograder.judge.checks.day03", "check_matches_torch",
                                       [("name", "SelfAttention")]), _conn(ns))
    assert right.passed, right.message
    exec(f"def _lie(self, *a, **k):\n    return {lie}\nSelfAttention.state_dict = _lie", ns)  # noqa: S102
    v = judge.run(judge.HiddenCall("autograder.judge.checks.day03", "check_matches_torch",
                                   [("name", "SelfAttention")]), _conn(ns))
    assert not v.passed and says in v.message and not v.internal, v.message


def test_check_modules_that_make_an_optimizer_here_warm_it_up():
    """Does every check module that creates an optimizer in the judge's process (not through
    ``in_kernel``) say so, so that the judge's warm-up imports PyTorch's compiler stack before
    the first hidden test instead of during it (about a second: Day 13's self-check)?"""
    import ast
    import importlib
    import pkgutil
    from pathlib import Path

    import autograder.judge.checks as checks

    def optimizers(tree):
        """torch.optim.<Class> attributes, those handed to in_kernel apart."""
        sent = {id(node.args[0]) for node in ast.walk(tree) if isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "in_kernel" and node.args}
        return [node for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                and ast.unparse(node.value) == "torch.optim" and node.attr[:1].isupper()
                and id(node) not in sent]

    flagged = []
    for info in pkgutil.iter_modules(checks.__path__):
        tree = ast.parse((Path(checks.__path__[0]) / f"{info.name}.py").read_text())
        if optimizers(tree):
            module = importlib.import_module(f"autograder.judge.checks.{info.name}")
            flagged.append(info.name)
            assert getattr(module, "JUDGE_STEPS_OPTIMIZERS", False), info.name
    assert sorted(flagged) == ["day09", "day10", "day13_train"]


def test_a_timeout_inside_the_learners_call_stops_the_notebook():
    """A check wraps an error of the learner's call as the learner's (``call``); a transport
    that timed out (or found the kernel dead) there must still stop the verdict, so that the
    kernel is interrupted, and the test fails with the judge's words."""
    call = judge.HiddenCall("autograder.judge.checks.day02", "check_softmax_values",
                            [("name", "softmax")])
    for stopped in ("timeout", "died"):
        inner = _conn({"softmax": lambda x, dim=-1: x.softmax(dim)}).transport
        requests = []

        def transport(req, stopped=stopped, inner=inner, requests=requests):
            requests.append(req)
            if len(requests) > 1:        # the name is found; the call never answers
                raise remote.JudgeError(f"{stopped}!", stopped=stopped)
            return inner(req)

        v = judge.run(call, remote.Conn(transport))
        assert (v.passed, v.stopped) == (False, stopped), v
        assert v.message == f"the kernel did not answer the judge: {stopped}!", v.message
