"""The documentation's mathematics renders and nothing in its text is lost to the browser.

The pages write formulas as TeX between dollars; arithmatex finds them outside code, and
docs/hooks/math.py turns each into MathML when the site is built. Everything else that looks
like a tag (`<x_i, x_j>` in prose, or in the parameter reference generated from the registry's
help strings) must be escaped, or the browser takes it for an unknown element and shows nothing.
These tests run each page through the site's own Markdown pipeline (mkdocs.yml's extensions and
the hook) without a whole build; the whole build, with the reference of every system and the
real-browser check of the built page, is in tests/test_docs.py (slow tier)."""

from __future__ import annotations

import importlib.util
import logging
import re
from html.parser import HTMLParser

import pytest

from _docs_pages import ROOT, chromium, load_hook, markdown_pipeline, probe_in_browser, raw_tags

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("mkdocs", "pymdownx", "latex2mathml")),
    reason="the docs extra is not installed (pip install -e '.[docs]')",
)

PAGES = sorted(
    p for p in (ROOT / "docs").rglob("*.md") if not {"hooks", "theme"} & set(p.relative_to(ROOT / "docs").parts)
)


def test_the_raw_tag_finder_finds_what_a_browser_would_drop():
    html = (
        "<p>a <x_i, x_j> b <Q x_i, K x_j> c <W, W_F(opt)> <code>&lt;x_i&gt;</code>"
        '<img alt="i" src="a.png"/> <input hidden> <math display="inline"><semantics><mrow>'
        "<mi>x</mi></mrow></semantics></math> <mi>y</mi></p>"
    )
    found = raw_tags(html)
    assert [f.split(": ", 1)[1] for f in found] == ["<x_i, x_j>", "<Q x_i, K x_j>", "<W, W_F(opt)>", "<mi>"]


def test_a_formula_becomes_mathml_with_its_tex():
    math = load_hook("math")
    out = math.mathml(r"\langle x_i, x_j \rangle > 1 - \delta", "inline")
    assert out.startswith('<math xmlns="http://www.w3.org/1998/Math/MathML" display="inline">')
    assert out.count("<msub>") == 2 and "&#x027E8;" in out and "&#x003B4;" in out  # angle, delta
    assert '<annotation encoding="application/x-tex">\\langle x_i, x_j \\rangle &gt; 1 - \\delta' in out
    assert not raw_tags(out)
    assert 'display="block"' in math.mathml(r"\frac{a}{b}", "block")


def test_a_formula_that_does_not_convert_fails_the_strict_build(caplog):
    math = load_hook("math")
    with pytest.raises(math.MathError, match=r"unknown TeX command \\foo"):
        math.mathml(r"\foo x")
    with pytest.raises(math.MathError, match="alignment"):
        math.mathml(r"\begin{aligned} a &= b \end{aligned}")
    page = '<p><span class="arithmatex">\\(\\foo x\\)</span></p>'
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.math"):
        assert math.render(page, "page.md") == page  # left as it was, and a warning: mkdocs
    assert "page.md" in caplog.text and "\\foo" in caplog.text  # --strict aborts on it


def test_every_page_renders_its_math_and_no_raw_tag(caplog):
    convert = markdown_pipeline()
    formulas, problems = {}, []
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.math"):
        for page in PAGES:
            html = convert(page.read_text(), page.name)
            name = str(page.relative_to(ROOT / "docs"))
            problems += [f"{name}: {tag}" for tag in raw_tags(html)]
            assert "arithmatex" not in html or "<math" in html, name
            formulas[name] = html.count("<math ")
    assert not problems, "\n".join(problems)
    assert not caplog.records, caplog.text
    # the pages that carry the equations write them as math
    assert formulas["physics.md"] > 50 and formulas["your_own_system.md"] > 20
    assert formulas["noisy_branches.md"] > 5 and formulas["architecture.md"] >= 1


def test_the_readme_has_no_raw_tag():
    """The README (rendered by GitHub, which drops unknown tags too) through the same pipeline:
    its only tags are the pictures' <img> and comments."""
    html = markdown_pipeline()((ROOT / "README.md").read_text(), "README.md")
    assert not raw_tags(html), "\n".join(raw_tags(html))


def test_math_is_found_outside_code_only():
    html = markdown_pipeline()("a $\\beta < 0$ b `$x$` c\n\n$$\n\\frac{1}{2}\n$$\n\n    $$ y $$\n")
    assert html.count("<math ") == 2 and 'display="block"' in html
    assert "<code>$x$</code>" in html and "$$ y $$" in html


class _Cells(HTMLParser):
    def __init__(self):
        super().__init__()
        self.cells, self.inside = [], False

    def handle_starttag(self, tag, attrs):
        if tag == "td":
            self.inside = True
            self.cells.append("")

    def handle_endtag(self, tag):
        if tag == "td":
            self.inside = False

    def handle_data(self, data):
        if self.inside:
            self.cells[-1] += data


HELP = [
    "clustering threshold delta: > 1 - delta",
    "s = <x_i, x_j> in [-1, 1]",
    "|<x_i,x_j> - rho_theory|",
    "its law: ||W_F(alpha)||_F (W), ||W_*(opt)||_* (KQ)",
    "|x_K - x*| / |x_0 - x*| at the last iteration",
    "layers of the network over [0, T](x)",
    "a & b &lt; c",
    "costs $5 and $6",
    "`code` and \\ backslash",
    "_under_ and *star*",
    ">= 1, <= 10000",
    "<W, W_F(opt)>",
    "<m - m_own(t), u>",
]


def test_the_parameter_reference_shows_help_text_exactly_as_written():
    """What a system's help says (tags, entities, emphasis, links, math, code) comes out of the
    generated reference's table as the same characters, and no tag."""
    parameters = load_hook("parameters")
    table = ["| key | meaning |", "|---|---|"] + [f"| `k` | {parameters._text(h)} |" for h in HELP]
    html = markdown_pipeline()("\n".join(table) + "\n")
    assert not raw_tags(html)
    assert "<math" not in html and "<em>" not in html and "<a " not in html
    cells = _Cells()
    cells.feed(html)
    assert cells.cells[1::2] == HELP


def test_a_generated_system_section_has_no_raw_tag():
    """One system's section of the parameter reference, as the build writes it: its outputs'
    long names hold inner products (<x_i,x_j>), its parameters bounds (>= 1)."""
    parameters = load_hook("parameters")
    section = parameters.system_section("attention_sphere")
    assert "&lt;x\\_i,x\\_j&gt;" in section  # escaped in the Markdown
    html = markdown_pipeline()(section)
    assert not raw_tags(html)
    assert re.search(r"<td>&gt;= 1, &lt;= 10000</td>", html)
    assert "&lt;x_i,x_j&gt;" in html


def test_the_formulas_render_in_a_real_browser(tmp_path):
    """physics.md through the site's pipeline, opened headless in Chromium: its first display
    formula with a fraction is laid out as math (the numerator above the denominator, the
    exponent raised), not shown as the text of its tags."""
    browser = chromium()
    if browser is None:
        pytest.skip("no Chromium (chromium, chromium-browser, google-chrome) on PATH")
    html = markdown_pipeline()((ROOT / "docs" / "physics.md").read_text(), "physics.md")
    page = tmp_path / "physics.html"
    page.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{html}</body></html>')
    found = probe_in_browser(page, browser)
    _check_the_rendered_formula(found)


def _check_the_rendered_formula(found: dict):
    assert found["formulas"] > 50
    assert found["display"] == "block math"  # MathML layout, not a plain block of text
    assert found["tex"].startswith("\\frac{dx_i}{dt} = P_{x_i}")  # the flow of physics.md §1.1
    numerator, denominator = found["numerator"], found["denominator"]
    assert numerator[1] <= denominator[0] + 1  # d x_i over dt: one above the other
    assert numerator[2] < denominator[3] and denominator[2] < numerator[3]  # in one column
    base, script = found["base"], found["script"]
    assert script[1] < base[1] and script[2] >= base[3] - 1  # e^{...}: raised, to the right
    assert found["box"][1] - found["box"][0] > 1.5 * (denominator[1] - denominator[0])
