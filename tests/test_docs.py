"""The documentation is in the repository and points only inside it: every "physics.md §..."
citation names a section docs/physics.md has, every link of the README and of the pages resolves
to a file of the repository (and an anchor to a heading of it), the parameter reference holds every
system's schema, and the site builds with warnings as errors into pages whose links all resolve
inside the site (the build test runs where the `docs` extra is installed)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
PHYSICS = ROOT / "docs" / "physics.md"
# "physics.md §1.4", "physics.md §1.3, §1.5", "physics.md §1.4-1.5", "physics.md 1.5"
CITATION = re.compile(r"physics\.md((?:[ ,;]+(?:and )?§?\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?)*)")
SECTION = re.compile(r"\d+(?:\.\d+)?")
MD_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HTML_LINK = re.compile(r"""(?:src|href)=["']([^"']+)["']""")
# pages the build writes (docs/hooks/parameters.py), not in the repository's tree
GENERATED = {ROOT / "docs" / "reference" / "parameters.md"}


def _headings(path: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in path.read_text().splitlines() if line.startswith("#")]


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc (and GitHub) give a heading: lower case, punctuation
    dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[\s]+", "-", text)


def _physics_sections() -> set[str]:
    found = set()
    for heading in _headings(PHYSICS):
        match = re.match(r"(\d+(?:\.\d+)?)\.?\s", heading)
        if match:
            found.add(match.group(1))
    return found


def _cited_files():
    yield ROOT / "README.md"
    yield from sorted((ROOT / "dyn").rglob("*.py"))
    yield from sorted((ROOT / "scenarios").glob("*.toml"))


def test_the_citation_pattern_reads_every_form_used():
    def cited(text):
        return [n for m in CITATION.finditer(text) for n in SECTION.findall(m.group(1))]

    assert cited("(physics.md §1.4-1.5): the") == ["1.4", "1.5"]
    assert cited("(physics.md §1.3, §1.5; Mun & ...") == ["1.3", "1.5"]
    assert cited("prefactor 1 (physics.md 1.5)") == ["1.5"]
    assert cited("see physics.md §3.") == ["3"]


def test_physics_md_is_the_one_in_the_repository_and_has_the_cited_sections():
    sections = _physics_sections()
    assert {"1.1", "1.2", "1.3", "1.4", "1.5", "2", "3", "4"} <= sections
    elsewhere = [p for p in ROOT.rglob("physics.md") if p != PHYSICS and ".venv" not in p.parts]
    assert not elsewhere, f"a second physics.md makes citations ambiguous: {elsewhere}"
    bad, count = [], 0
    for path in _cited_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in CITATION.finditer(line):
                count += 1
                for cited in SECTION.findall(match.group(1)):
                    if cited not in sections:
                        bad.append(f"{path.relative_to(ROOT)}:{number}: §{cited}")
    assert count > 50  # the README, the docstrings and the scenario files cite it throughout
    assert not bad, "citations of sections docs/physics.md does not have:\n" + "\n".join(bad)


def test_nothing_cites_a_file_outside_the_repository():
    pages = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "dyn").rglob("*.py")),
        *sorted((ROOT / "scenarios").glob("*.toml")),
    ]
    for path in pages:
        text = path.read_text()
        assert "../shared" not in text and "/work/" not in text, path


def _markdown_links(path: Path) -> list[str]:
    text = path.read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links: fenced,
    text = re.sub(r"^(?: {4}|\t)(?!\s*(?:[-*+]|\d+\.) ).*$", "", text, flags=re.M)  # indented,
    text = re.sub(r"`[^`\n]*`", "", text)  # and inline; nor does math: `v[rho](x)` is none
    text = re.sub(r"\$\$.*?\$\$|\$[^$\n]+\$", "", text, flags=re.S)
    return MD_LINK.findall(text) + HTML_LINK.findall(text)


def _check_target(source: Path, target: str, base: Path) -> str | None:
    """None when the link resolves inside `base`, else what is wrong with it."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return f"points outside the repository: {target}"
    if not parts.path:  # an anchor on the same page
        resolved = source
    else:
        if parts.path.startswith("/"):
            return f"absolute path: {target}"
        resolved = (source.parent / unquote(parts.path)).resolve()
        if base.resolve() not in resolved.parents and resolved != base.resolve():
            return f"leaves the repository: {target}"
        if resolved in GENERATED:
            return None
        if not resolved.exists():
            return f"no such file: {target}"
    if parts.fragment and resolved.suffix == ".md":
        # a heading's anchor, or an object mkdocstrings documents there (`::: dyn.x.y`)
        objects = re.findall(r"^::: ([\w.]+)", resolved.read_text(), flags=re.M)
        if parts.fragment not in {_slug(h) for h in _headings(resolved)} | set(objects):
            return f"no heading #{parts.fragment} in {resolved.name}"
    return None


def test_every_link_of_the_readme_and_the_pages_resolves_inside_the_repository():
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    problems, count = [], 0
    for source in sources:
        for target in _markdown_links(source):
            count += 1
            problem = _check_target(source, target, ROOT)
            if problem:
                problems.append(f"{source.relative_to(ROOT)}: {problem}")
    assert count > 40
    assert not problems, "\n".join(problems)


def test_the_readme_links_to_the_documentation():
    targets = set(_markdown_links(ROOT / "README.md"))
    assert {"docs/index.md", "docs/physics.md", "docs/reference/api.md"} <= {t.split("#")[0] for t in targets}


def test_a_link_outside_the_repository_is_caught(tmp_path):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other page\n")
    page.write_text(
        "[a](other.md#other-page) [b](../../shared/docs/design.md) [c](https://example.org) [d](other.md#missing)\n"
    )
    found = [_check_target(page, t, tmp_path) for t in _markdown_links(page)]
    assert found[0] is None
    assert "leaves the repository" in found[1] and "outside" in found[2]
    assert "no heading" in found[3]


def _parameter_reference():
    spec = importlib.util.spec_from_file_location("docs_parameters", ROOT / "docs" / "hooks" / "parameters.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# the page's anchors come from markdown's slugify (the site's own): markdown comes with the docs
# extra (mkdocs), which .ci/run installs; the README's `pip install -e '.[test]'` does not.
# Slow tier: it describes and resolves every system (JAX compiles the gradient-flow models'
# checks); .ci/run builds the site strict on every run, and the build makes this page by
# describing every system.
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("markdown") is None, reason="the docs extra (markdown) is not installed")
def test_the_parameter_reference_holds_every_systems_schema():
    from dyn import systems
    from dyn.core.errors import ScenarioError
    from dyn.engine import scenario
    from dyn.presentation.describe import describe, listed_systems

    text = _parameter_reference().markdown()
    sections = dict(
        zip(re.findall(r"^## `([^`]+)`", text, flags=re.M), re.split(r"^## `[^`]+`", text, flags=re.M)[1:], strict=True)
    )
    # the registry's systems, and those the shipped scenarios name by import path (module:Class)
    assert list(sections) == listed_systems() and set(systems.names()) < set(sections)
    assert "dyn.frontier.resnet_width:ResNetWidth" in sections
    for name, section in sections.items():
        system = systems.get(name)
        for key, field in system.params.items():  # the schema itself, not only describe's words
            assert re.search(rf"^\| `{re.escape(key)}` \| {field.kind} \|", section, flags=re.M), (name, key)
        doc = {"scenario": {"name": "x", "system": name}}
        if system.equation == "sde":
            doc["integrator"] = {"method": "euler_maruyama"}
        try:
            setup = scenario.resolve(doc).setup
        except ScenarioError as exc:  # a model in JAX alone (dyn.gradient_flow) refuses numba
            assert exc.key == "integrator.backend", str(exc)
            doc["integrator"] = {**doc.get("integrator", {}), "backend": "diffrax"}
            setup = scenario.resolve(doc).setup
        for output in system.outputs(setup):
            assert f"| `{output.name}` |" in section, (name, output.name)
        for backend, methods in describe(name).backends.items():  # as `dyn list SYSTEM` says
            assert f"- `{backend}`: " + ", ".join(f"`{m}`" for m in methods) in section
    # the solvers: an SDE system lists no ODE method, a system with a JAX path its methods
    noisy = sections["noisy_attention"]
    assert "`euler_maruyama`" in noisy and "`rk4`" not in noisy.split("**Solver**")[1]
    assert "- `jax`: `euler`, `heun`, `rk4`" in sections["attention_sphere"]
    # a parameter's bounds and default are the schema's
    assert re.search(
        r"^\| `n` \| int \| `32` \| &gt;= 1, &lt;= 10000 \|", sections["attention_sphere"], flags=re.M
    )  # escaped: no tag to a browser
    assert "`attention_clusters`" in sections["attention_sphere"]  # the scenarios that use it
    assert "| `rho` (in equiangular) |" in sections["attention_sphere"]  # outputs of other settings


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key in ("href", "src") and value:
                self.links.append(value)


_NO_DOCS = any(importlib.util.find_spec(m) is None for m in ("mkdocs", "pymdownx", "latex2mathml"))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once for the tests below: `mkdocs build --strict` (30 s on 2 busy cores,
    most of it the parameter reference of every system)."""
    site = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return site


# slow tier: a whole build; .ci/run builds the site strict on every run by itself, and
# tests/test_docs_math.py renders every page through the same Markdown pipeline in the default tier
@pytest.mark.slow
@pytest.mark.skipif(_NO_DOCS, reason="the docs extra is not installed (pip install -e '.[docs]')")
def test_the_site_builds_strict_and_its_links_stay_inside(site):
    pages = sorted(site.rglob("*.html"))
    assert {"index.html", "physics.html"} <= {p.name for p in pages}
    parameters = (site / "reference" / "parameters.html").read_text()
    assert "attention_sphere" in parameters and "inverse temperature beta" in parameters
    assert "dyn.engine.runner.run" in (site / "reference" / "api.html").read_text()
    problems = []
    for page in pages:
        parser = _Links()
        parser.feed(page.read_text())
        for target in parser.links:
            target = target.split("?")[0]
            if target.startswith("/") and not target.startswith("//"):  # 404.html: from the root
                target = str(Path(*[".."] * len(page.relative_to(site).parts[:-1]) or ["."], target.lstrip("/")))
            problem = _check_target(page, target, site)
            if problem and "no heading" not in problem:
                problems.append(f"{page.relative_to(site)}: {problem}")
    assert not problems, "\n".join(problems[:20])


@pytest.mark.slow
@pytest.mark.skipif(_NO_DOCS, reason="the docs extra is not installed (pip install -e '.[docs]')")
def test_the_built_site_has_no_raw_tag_and_its_math_is_mathml(site):
    """No page of the built site holds text a browser would take for a tag and drop (outside
    code it is escaped, inside math it is MathML), the generated reference included."""
    from _docs_pages import raw_tags

    problems = [
        f"{page.relative_to(site)}:{tag}" for page in sorted(site.rglob("*.html")) for tag in raw_tags(page.read_text())
    ]
    assert not problems, "\n".join(problems[:30])
    physics = (site / "physics.html").read_text()
    assert physics.count("<math ") > 50 and 'class="arithmatex">\\(' not in physics
    parameters = (site / "reference" / "parameters.html").read_text()
    assert "clustering threshold delta" in parameters and "&lt;x_i,x_j&gt;" in parameters


@pytest.mark.slow
@pytest.mark.skipif(_NO_DOCS, reason="the docs extra is not installed (pip install -e '.[docs]')")
def test_the_built_page_renders_its_formulas_in_a_real_browser(site):
    """The built physics page, with the site's theme, opened headless in Chromium."""
    from _docs_pages import chromium, probe_in_browser
    from test_docs_math import _check_the_rendered_formula

    browser = chromium()
    if browser is None:
        pytest.skip("no Chromium (chromium, chromium-browser, google-chrome) on PATH")
    _check_the_rendered_formula(probe_in_browser(site / "physics.html", browser))
