"""Is the judge's memory bounded by construction, whatever the kernel answers?

The attacks of issue 47 ("Small answers, large judge"), each inside every byte bound:

- Day 13's ``generate`` answering one sampled id of 2,000,000 or 150,000,000: the check sized
  ``torch.bincount`` by it and printed every count (2.69 GiB, then 20.8 GiB and killed);
- an answer of 46 MB holding 4.6 million empty lists (or zeros): ``json`` made every one of
  them before the wire's checks ran (the judge reached 1.97 GiB);
- a kernel value quoted in a message (``expect_module``'s ``repr`` of a million-item list).

Each must fail only the affected check, with a short message, never as the grader's fault,
and within :data:`BOUND` for the whole grading process (``docs/security.md``). Judge-side
cases run the real checks against the course's agent behind a direct transport (the kernel's
half in this process, as in ``tests/test_judge.py``); the end-to-end case grades a notebook.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import torch

from autograder import judge
from autograder.judge import checks, remote
from autograder.sandbox import GiB
from course import agent, wire

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import submissions as S  # noqa: E402

BOUND = 1.5 * GiB          # the grading process, whatever the kernel answers (security.md)
MiB = 2**20


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))


class Peak:
    """The growth of this process's peak resident memory inside the ``with`` block (Linux:
    ``clear_refs`` resets the high-water mark)."""

    def __enter__(self):
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pytest.skip("the peak resident memory cannot be reset here")
        self.start = _status("VmRSS:")
        return self

    def __exit__(self, *exc):
        self.grew = _status("VmHWM:") - self.start


def _text(js: str) -> str:
    return base64.b64encode(js.encode()).decode("ascii")


def _nested(item: str, n: int) -> str:
    """A wire list of ``n`` copies of ``item``, 100,000 per inner list (each within
    MAX_ITEMS and the depth)."""
    inner = '{"$l":[' + ",".join([item] * 100_000) + "]}"
    return '{"$l":[' + ",".join([inner] * (n // 100_000)) + "]}"


def _conn(ns: dict, first: str | None = None) -> remote.Conn:
    """A Conn to the agent serving ``ns``; ``first`` replaces the first answer."""
    agent.reset()
    agent.USER_NS = ns
    answers = [first] if first is not None else []
    return remote.Conn(lambda req: answers.pop() if answers else agent.handle(req))


# --------------------------------------------------------------------------- the wire


@pytest.mark.parametrize("item", ['{"$l":[]}', "[]", "0", '{"$d":[]}'])
def test_a_flood_of_tiny_values_is_refused_before_json_makes_it(item):
    """4.6 million empty lists (46 MB; zeros, raw lists, empty dicts alike): refused by a
    count of the text before a single object is made."""
    js = _nested(item, 4_600_000)
    with Peak() as peak, pytest.raises(wire.WireError, match="more than 1,000,000 values"):
        wire.loads(js)
    assert peak.grew < 16 * MiB, peak.grew


def test_decoding_takes_its_budget_before_it_makes_a_value():
    """A parsed value of 1.2 million items breaks a budget of 1 million; a budget spans the
    values of every reply it is given."""
    parsed = {"$l": [{"$l": [0] * 100_000} for _ in range(12)]}
    with pytest.raises(wire.WireError, match="too many items"):
        wire.decode(parsed)
    budget = wire.Nodes(250_000)
    wire.decode({"$l": [0] * 100_000}, nodes=budget)
    wire.decode({"$l": [0] * 100_000}, nodes=budget)
    with pytest.raises(wire.WireError):
        wire.decode({"$l": [0] * 100_000}, nodes=budget)
    assert wire.decode({"$z": [2, 3]}) == torch.Size([2, 3])
    with pytest.raises(wire.WireError):
        wire.decode({"$z": [1] * 17})


def test_one_test_decodes_a_bounded_number_of_values(monkeypatch):
    """Answers under the per-answer count, each 45% of a test's budget (2,000,000 values,
    scaled down here): the third of one test fails it; a fresh test has a fresh budget."""
    monkeypatch.setattr(remote, "MAX_TEST_NODES", remote.MAX_TEST_NODES // 20)
    n = 45 * remote.MAX_TEST_NODES // 100
    text = _text('{"$l":[' + ",".join(["0"] * n) + "]}")
    conn = remote.Conn(lambda _req: text)
    conn.get("a")
    conn.get("b")
    with pytest.raises(remote.JudgeError, match="too many items"):
        conn.get("c")
    assert len(remote.Conn(lambda _req: text).get("a")) == n


def test_an_oversized_answer_is_refused_before_it_is_decoded():
    """Base64 text longer than a 64 MiB reply can be: refused from its length."""
    text = "A" * (remote.MAX_ANSWER_TEXT + 4)
    with Peak() as peak, pytest.raises(remote.JudgeError, match="larger than 64 MiB"):
        remote.Conn(lambda _req: text).get("x")
    assert peak.grew < 16 * MiB, peak.grew


# --------------------------------------------------------------------------- messages


def test_shown_is_bounded_whatever_the_value():
    """A million-item list, a 100 MB string, a 43-million-element tensor, a 3,000-digit int,
    a proxy: at most 120 characters each, in well under a second."""
    big = torch.zeros([3] * 16, dtype=torch.int8)        # repr would print 43 million zeros
    values = [[[]] * 1_000_000, "x" * 100_000_000, big, 10**3000, [[[[[1]]]]],
              {str(i): list(range(1000)) for i in range(1000)}, object()]
    start = time.monotonic()
    for v in values:
        assert len(checks.shown(v)) <= checks.SHOWN
    assert time.monotonic() - start < 1.0
    assert checks.shown([1, "a", (2,)]) == "[1, 'a', (2,)]"
    assert checks.shown(torch.tensor([1, 2])) == "tensor([1, 2])"
    assert "(3, 3, 3" in checks.shown(big)


def test_labels_never_quote_a_kernel_value_in_full():
    """expect_module of a "class" the kernel answered as 90,000 empty lists (within the
    wire's bounds), given a million-item argument, and a call of an object with a 5 MB name:
    no message quotes them in full."""
    cls = _conn({"SelfAttention": [[]] * 90_000}).get("SelfAttention")
    with pytest.raises(checks.CheckFailure) as err:
        checks.expect_module(cls, 64, [[]] * 1_000_000)
    assert len(str(err.value)) < 1000, len(str(err.value))

    class Named:
        __name__ = "n" * 5_000_000

        def __call__(self):
            raise ValueError("no")
    proxy = _conn({"f": Named()}).get("f")
    with pytest.raises(checks.CheckFailure) as err:
        checks.call(proxy)
    assert len(str(err.value)) < 1000, len(str(err.value))


# --------------------------------------------------------------------------- Day 13's ids

SAMPLING = ["check_generate_temperature", "check_generate_top_k", "check_generate_top_p"]


def _sampler(bad_id: int):
    """A ``generate`` that samples correctly except one draw, answered as ``bad_id``."""
    def generate(model, idx, n, temperature=1.0, top_k=None, top_p=None, generator=None):
        out = torch.cat([idx, torch.zeros(idx.shape[0], n, dtype=torch.long)], 1)
        out[0, -1] = bad_id
        return out
    return generate


@pytest.mark.parametrize("bad_id", [2_000_000, 150_000_000, -1])
@pytest.mark.parametrize("check", SAMPLING)
def test_a_sampled_id_outside_the_vocabulary_fails_the_check_in_bounded_memory(check, bad_id):
    """One id of 150,000,000 among 20,000 draws: the check fails naming it, in one line, the
    learner's fault (no grader error), and the judge grows by less than 64 MiB (a bincount
    sized by it took 1.2 GB and printed 150 million counts)."""
    call = judge.HiddenCall("autograder.judge.checks.day13_sampling", check,
                            [("name", "generate")])
    conn = _conn({"generate": _sampler(bad_id)})
    with Peak() as peak:
        v = judge.run(call, conn, seed=b"memory")
    assert not v.passed and not v.internal, v
    assert f"token id {bad_id}," in v.message and len(v.message) < 300, v.message
    assert peak.grew < 64 * MiB, peak.grew


def test_a_flooded_first_answer_fails_a_day3_test_in_bounded_memory():
    """The Day 3 agent whose first answer per test is 46 MB of 4.6 million empty lists: the
    test fails with "the kernel did not answer the judge", not a grader error, and the judge
    grows by two copies of the text at most (it reached 1.97 GiB)."""
    call = judge.HiddenCall("autograder.judge.checks.day03", "check_parameters",
                            [("name", "SelfAttention")])
    flood = _text(_nested('{"$l":[]}', 4_600_000))
    conn = _conn({}, first=flood)
    with Peak() as peak:
        v = judge.run(call, conn, seed=b"memory")
    assert not v.passed and not v.internal and "did not answer the judge" in v.message, v
    assert peak.grew < 160 * MiB, peak.grew     # the text decoded twice (58 MB each), no more


# --------------------------------------------------------------------------- end to end

# The learner's forward returns 46 lists of 100,000 empty lists: the course's own agent sends
# them as they are (each list within MAX_ITEMS, depth 2), 46 MB of text. No course internal
# is touched, so the static review has nothing to flag and the judge must refuse the answer.
FLOOD = r'''
_FLOOD = [[[]] * 100_000] * 46
SelfAttention.forward = lambda self, x, mask=None: _FLOOD
'''


def _after_class(nb, name: str, code: str):
    nb = nbformat.from_dict(nb)
    at = next(i for i, c in enumerate(nb.cells)
              if c.cell_type == "code" and f"class {name}(" in c.source)
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(code))
    return nb


MEASURE = r'''
import json, resource, sys
from pathlib import Path
from autograder.grading import pipeline
from autograder.sandbox import GiB, Limits
res = pipeline.grade(Path(sys.argv[1]), Path(sys.argv[2]), days=["day03_self_attention"],
                     jobs=1, sandbox="auto", resume=False,
                     limits=Limits(memory=3 * GiB, cell_timeout=120, notebook_timeout=300))
print(json.dumps({"self_max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "children_max_rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "results": [r.to_json() for r in res]}))
'''


@pytest.mark.slow
def test_a_graded_flood_of_empty_lists_stays_within_the_bound(root, tmp_path):
    """A Day 3 forward answering 4.6 million empty lists, graded as a class would be: graded
    (not environment-error), every test of SelfAttention failed ("the kernel did not answer
    the judge", or not awarded by the gate), and the grading process under BOUND."""
    subs = tmp_path / "submitted"
    S.put(subs, "flood", _after_class(S.reference(root, "day03_self_attention"),
                                      "SelfAttention", FLOOD), day="day03_self_attention")
    out = subprocess.run([sys.executable, "-c", MEASURE, str(root), str(subs)],
                         capture_output=True, text=True, timeout=600, cwd=root)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    r = data["results"][0]
    assert r["status"] == "graded", r
    flooded = [t for t in r["tests"] if t["grade_id"] in (
        "day03_parameters", "day03_matches_torch", "day03_mask", "day03_runs_on_any_device")]
    assert len(flooded) == 4 and not any(t["points"] for t in flooded), r["tests"]
    assert any("not in the grading format" in t["message"] for t in flooded), r["tests"]
    assert all("not in the grading format" in t["message"] or "not awarded" in t["message"]
               for t in flooded), r["tests"]
    # the worker that judges is a child (so is the kernel, under its own 3 GiB limit)
    assert max(data["self_max_rss_kib"], data["children_max_rss_kib"]) * 1024 < BOUND, data


def test_a_meta_tensor_costs_the_elements_it_names():
    """A parameter on the meta device has no data, but the judge makes weights of its shape:
    a 20,000 x 10,000 one (the attack that took the judge to 13.9 GB) is refused at decoding,
    while the course's TinyGPT on meta (3.2M elements) decodes."""
    import json

    import pytest
    import torch

    from course import wire

    big = json.dumps(wire.encode(torch.empty(20000, 10000, device="meta")))
    with pytest.raises(wire.WireError):
        wire.decode(wire.loads(big))
    ok = wire.decode(wire.loads(json.dumps(wire.encode(torch.empty(3_221_504, device="meta")))))
    assert ok.shape == (3_221_504,) and ok.device.type == "meta"
