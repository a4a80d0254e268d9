"""The documentation site (docs/, mkdocs.yml): it builds with `mkdocs build --strict`, its
links and anchors resolve, every CLI verb has a page, and the pages' examples work.

Examples are the `sh` blocks of docs/cli/*.md, one `railab` command a line. Every one is
parsed with railab's own argument parser. Those that need no deployed lab are run
in-process (in a scratch folder that sees the repository's labs/ and experiments/) and
must exit 0. A block that needs a lab says so in a comment just above it:

    <!-- example: needs a deployed lab -->    (the command talks to a running lab)
    <!-- example: deploys a lab -->           (the command builds one itself: root, minutes)

Those are parsed but not run; the test names the reason.
"""
from __future__ import annotations

import contextlib
import html.parser
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CLI_DOCS = DOCS / "cli"
README_MAX_LINES = 150

NOT_RUN = {
    "needs a deployed lab": "talks to a running lab; tests/unit deploys none",
    "deploys a lab": "builds a lab itself (root, seconds to minutes); the lab tests cover deploys",
}
_MARK = re.compile(r"<!--\s*example:\s*(.*?)\s*-->")


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    argv: tuple[str, ...]
    not_run: str | None        # the reason it is not run, None: it runs

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}:{' '.join(self.argv[:3])}"


def examples() -> list[Example]:
    found = []
    for page in sorted(CLI_DOCS.glob("*.md")):
        lines = page.read_text().splitlines()
        i = 0
        while i < len(lines):
            if lines[i].strip() != "```sh":
                i += 1
                continue
            above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            mark = _MARK.fullmatch(above.strip())
            reason = mark.group(1) if mark else None
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                words = shlex.split(lines[i], comments=True)
                if words:
                    assert words[0] == "railab", f"{page.name}:{i + 1}: an example is one railab command"
                    found.append(Example(page.name, i + 1, tuple(words[1:]), reason))
                i += 1
            i += 1
    return found


EXAMPLES = examples()


def _verb_pages() -> dict[str, Path]:
    from dataplane.cli.main import VERB_MODULES
    return {m.rstrip("_"): CLI_DOCS / f"{m.rstrip('_')}.md" for m in VERB_MODULES}


def test_every_verb_has_a_page_with_an_example_that_runs():
    pages = _verb_pages()
    missing = [verb for verb, page in pages.items() if not page.exists()]
    assert not missing, f"verbs without a page under docs/cli/: {missing}"
    runs = {e.page for e in EXAMPLES if e.not_run is None}
    assert not [v for v, p in pages.items() if p.name not in runs], "every verb page runs an example"
    extra = {p.name for p in CLI_DOCS.glob("*.md")} - {p.name for p in pages.values()} - {"index.md"}
    assert not extra, f"pages for verbs railab does not have: {extra}"


def test_not_run_examples_say_why():
    odd = {e.not_run for e in EXAMPLES if e.not_run is not None} - set(NOT_RUN)
    assert not odd, f"unknown reasons (known: {sorted(NOT_RUN)}): {odd}"


def _parse(argv: tuple[str, ...]) -> int:
    from dataplane.cli.main import build_parser
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            build_parser().parse_args(list(argv))
    except SystemExit as exit_:
        return int(exit_.code or 0) if "--help" in argv else 2
    return 0


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.id)
def test_example_parses(example):
    assert _parse(example.argv) == 0, f"railab {' '.join(example.argv)}: railab's parser refuses it"


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A working folder in which labs/ and experiments/ are the repository's."""
    for name in ("labs", "experiments"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


RUN_PAGES = sorted({e.page for e in EXAMPLES if e.not_run is None})


@pytest.mark.parametrize("page", RUN_PAGES)
def test_examples_run(page, scratch, capsys):
    """A page's examples in order, in one folder (a later one may read what an earlier wrote)."""
    from dataplane.cli.main import main
    for example in [e for e in EXAMPLES if e.page == page and e.not_run is None]:
        try:
            status = main(list(example.argv))
        except SystemExit as exit_:         # --help, and argparse's own exits
            status = exit_.code or 0
        out, err = capsys.readouterr()
        assert status == 0, f"{example.id}: railab {' '.join(example.argv)} exited {status}:\n{out}\n{err}"
        assert (out + err).strip(), f"{example.id}: printed nothing"


@pytest.mark.parametrize("reason", sorted(NOT_RUN))
def test_examples_not_run_here_are_marked_with_a_known_reason(reason):
    """Examples that deploy or need a lab are parsed (test_example_parses), not run in the
    unit tests; each reason must still mark some example, or it is stale."""
    which = [e for e in EXAMPLES if e.not_run == reason]
    assert which, f"no example is marked '{reason}': drop it from NOT_RUN"


# ---------------------------------------------------------------- the site


class _Ids(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("mkdocs is missing (Debian: mkdocs, mkdocs-material; scripts/setup.sh)")
        pytest.skip("needs mkdocs and mkdocs-material (Debian packages; scripts/setup.sh installs them)")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-W", "ignore", "-m", "mkdocs", "build", "--strict",
                           "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_site_builds_strict(site):
    assert (site / "index.html").exists()
    assert (site / "cli" / "topo.html").exists()


def test_every_page_is_in_the_navigation():
    import yaml
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def pages(items):
        for item in items:
            for value in item.values():
                yield from (pages(value) if isinstance(value, list) else [value])
    listed = set(pages(nav))
    present = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert present - listed == set(), "pages missing from mkdocs.yml's nav"
    assert listed - present == set(), "nav entries without a page"


def test_links_and_anchors_resolve(site):
    """mkdocs --strict checks that linked pages exist; this checks their #anchors too."""
    ids: dict[Path, set[str]] = {}
    links: dict[Path, list[str]] = {}
    for page in site.rglob("*.html"):
        parser = _Ids()
        parser.feed(page.read_text())
        ids[page], links[page] = parser.ids, parser.links
    broken = []
    for page, hrefs in links.items():
        if "assets" in page.parts or page.name == "404.html":
            continue
        for href in hrefs:
            if re.match(r"^[a-z]+:", href) or "#" not in href:
                continue
            target, anchor = href.split("#", 1)
            path = (page.parent / target).resolve() if target else page
            if path.suffix == ".html" and path in ids and anchor and anchor not in ids[path]:
                broken.append(f"{page.relative_to(site)} -> {href}")
    assert not broken, broken


def test_readme_is_short_and_starts_with_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    commands = [line.split()[1] for line in lines if line.startswith("make ")]
    assert commands[:2] == ["demo", "test"], commands


def test_readme_links_resolve():
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, missing
