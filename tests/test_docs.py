"""Do the README and the pages of docs/ hold together: links that resolve, commands that exist,
and a README that stays a front page?"""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
AUDIENCES = ("learners", "instructors", "authors", "security", "record")
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_LINK = re.compile(r"\[[^\]]*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)
_WORD = re.compile(r"^[a-z][a-z-]*$")


def _read(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _code(text: str) -> list[str]:
    """The fenced code blocks and inline code spans of a markdown text."""
    blocks = [m.group(2) for m in _FENCE.finditer(text)]
    return blocks + [m.group(2) for m in _SPAN.finditer(_FENCE.sub("", text))]


def _prose(text: str) -> str:
    """The text without its code blocks and code spans (a link written in code is not one)."""
    return _SPAN.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text, lower case, without punctuation,
    spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)     # a link shows its text
    text = text.replace("`", "").replace("*", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a page; a repeated heading gets -1, -2... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for m in _HEADING.finditer(_FENCE.sub("", _read(page))):
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def _targets(page: Path) -> list[str]:
    return _LINK.findall(_prose(_read(page)))


def test_the_slugs_are_githubs():
    """Are headings with code, punctuation and apostrophes slugged as GitHub does?"""
    assert slug("The trust boundary: hidden tests are judged outside the learner's kernel") == \
        "the-trust-boundary-hidden-tests-are-judged-outside-the-learners-kernel"
    assert slug("One machine: `make classroom`") == "one-machine-make-classroom"
    assert slug("`verify`: the proof") == "verify-the-proof"
    assert slug("Run profiles: CPU, GPU, grading") == "run-profiles-cpu-gpu-grading"


def test_every_relative_link_resolves_to_a_file_and_a_heading():
    """Does every relative link of README.md and docs/*.md name an existing file, and every
    #anchor a heading of that file?"""
    broken = []
    for page in PAGES:
        for target in _targets(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):     # https:, mailto: ...
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{_rel(page)}: {target} (no such file)")
            elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
                broken.append(f"{_rel(page)}: {target} (no such heading in {dest.name})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def _autograder_commands() -> set[tuple[str, ...]]:
    """Each `python -m autograder[.module] [sub [action]]` named in code, as the argument
    vector before --help: ("-m", "autograder", "grade"), ("-m", "autograder.benchmark")..."""
    found = set()
    for page in PAGES:
        for code in _code(_read(page)):
            for line in code.splitlines():
                for m in re.finditer(r"python -m (autograder(?:\.\w+)*)\b([^#`|;&]*)", line):
                    words = m.group(2).split()
                    command = ("-m", m.group(1))
                    if m.group(1) == "autograder" and words and _WORD.match(words[0]):
                        command += tuple(words[:2] if len(words) > 1 and _WORD.match(words[1])
                                         else words[:1])
                    found.add(command)
    return found


def _help(command: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *command, "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def _actions(help_text: str) -> set[str] | None:
    """The choices of a command's first positional argument ({start,stop,...}), if any."""
    part = help_text.split("positional arguments:", 1)
    m = re.search(r"^\s+\{([\w,-]+)\}", part[1], re.M) if len(part) == 2 else None
    return set(m.group(1).split(",")) if m else None


def test_every_autograder_command_named_in_the_docs_exists():
    """Does every `python -m autograder <sub>` and `python -m autograder.<module>` in a code
    span or block answer --help with exit code 0 (each distinct command once)?"""
    named = _autograder_commands()
    assert ("-m", "autograder", "grade") in named and ("-m", "autograder.benchmark") in named
    # a command's own --help first; a second word runs too when it is one of the command's
    # actions (`classroom start`), must be one when the command has actions, else is an
    # argument (`grade submitted`)
    first = sorted({c[:3] for c in named})
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = dict(zip(first, pool.map(_help, first), strict=True))
    failed = [f"python {' '.join(c)} --help: exit {r.returncode}\n{r.stderr[-500:]}"
              for c, r in done.items() if r.returncode != 0]
    second = set()
    for c in named:
        if len(c) == 4 and done[c[:3]].returncode == 0:
            actions = _actions(done[c[:3]].stdout)
            if actions is not None and c[3] not in actions:
                failed.append(f"python {' '.join(c)}: {c[3]!r} is none of {sorted(actions)}")
            elif actions is not None:
                second.add(c)
    with ThreadPoolExecutor(max_workers=4) as pool:
        for c, r in zip(sorted(second), pool.map(_help, sorted(second)), strict=True):
            if r.returncode != 0:
                failed.append(f"python {' '.join(c)} --help: exit {r.returncode}\n"
                              f"{r.stderr[-500:]}")
    assert not failed, "\n".join(failed)


def test_every_make_target_named_in_the_docs_exists():
    """Is every `make <target>` in a code span or block a target of the Makefile?"""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    missing = []
    for page in PAGES:
        for code in _code(_read(page)):
            for m in re.finditer(r"(?:^|\s)make((?:[ \t]+[^\s#`]+)*)", code):
                words = [w for w in m.group(1).split() if "=" not in w and not
                         w.startswith("-")]
                if words and words[0] not in targets:
                    missing.append(f"{_rel(page)}: make {words[0]}")
    assert not missing, "no such Makefile target:\n" + "\n".join(missing)


def test_the_readme_is_a_front_page_that_links_to_every_docs_page():
    """Is README.md at most 200 lines, and does it link to each page of docs/?"""
    assert len(_read(README).splitlines()) <= 200
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert {f"{a}.md" for a in AUDIENCES} <= pages
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in _targets(README)}
    unlinked = sorted(n for n in pages if (ROOT / "docs" / n).resolve() not in linked)
    assert not unlinked, f"the README does not link to {unlinked}"


def test_every_docs_page_opens_by_saying_who_it_is_for():
    """Does each docs page start with its title, then one paragraph naming its reader?"""
    for page in sorted((ROOT / "docs").glob("*.md")):
        title, _, rest = _read(page).partition("\n\n")
        assert title.startswith("# "), page.name
        assert rest.startswith("This page is for "), page.name


def test_the_benchmark_record_appends_what_was_printed_under_its_command_and_machine(tmp_path):
    """Does ``--record`` start a new record with the page's header, then append each run's
    printed lines under the command (without ``--record``) and the machine that measured it?"""
    from autograder.benchmark_record import RECORD_HEADER, recorded

    record = tmp_path / "docs" / "benchmark-record.md"
    for figure in ("first: 1.0 s", "second: 2.0 s"):
        code = recorded(lambda argv, f=figure: print(f) or 0, record,
                        ["--students", "8", "--record", str(record)])
        assert code == 0
    text = _read(record)
    assert text.startswith(RECORD_HEADER) and text.count("# Benchmark record") == 1
    assert text.count("`python -m autograder.benchmark --students 8`") == 2
    assert text.index("first: 1.0 s") < text.index("second: 2.0 s")
    assert "cores" in text and "PyTorch" in text and "--record" not in text.split("\n## ")[1]


def _course_variables() -> set[str]:
    """The course's own environment variables (``TFS_*``, ``COURSE_*``, ``AUTOGRADER_*``) that
    autograder/ and course/ name in their code (``__all__`` lists aside)."""
    import ast

    names: set[str] = set()
    pattern = re.compile(r"\b(?:TFS|COURSE|AUTOGRADER)_[A-Z0-9_]+\b")
    for path in [*(ROOT / "autograder").rglob("*.py"), *(ROOT / "course").rglob("*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        exported = {id(c) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                    for c in ast.walk(node.value)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in exported:
                names |= set(pattern.findall(node.value))
    return names - {"COURSE_DAYS"}   # a constant's name, in a docstring


def test_the_architecture_map_names_what_exists_and_every_variable():
    """Does docs/architecture.md name only modules that exist, and list every environment
    variable of the course's own that the code reads (and none that it does not)?"""
    page = _read(ROOT / "docs" / "architecture.md")
    modules = set(re.findall(r"\b((?:autograder|course)(?:\.[a-z_0-9]+)+)", page))
    missing = []
    for dotted in sorted(modules):
        parts = dotted.split(".")
        for n in range(len(parts), 0, -1):     # the longest prefix that is a module or package
            base = ROOT.joinpath(*parts[:n])
            if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
                break
        else:
            missing.append(dotted)
    assert not missing, f"named in architecture.md but not in the code: {missing}"
    table = page.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`((?:TFS|COURSE|AUTOGRADER)_[A-Z0-9_]+)`", table))
    code = _course_variables()
    assert code - listed == set(), f"read by the code, missing from the map: {code - listed}"
    assert listed - code == set(), f"on the map, read by no code: {listed - code}"
