"""Helpers of the documentation tests: the site's Markdown pipeline (mkdocs.yml's extensions and
the math hook) without a whole build, a finder of raw tags in HTML, and a headless Chromium that
reports where the browser laid out a page's first formula."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the elements the site's pages are made of: HTML (Markdown's output, the readthedocs theme,
# mkdocstrings), MathML (docs/hooks/math.py), and SVG
HTML = set(
    """a abbr address area article aside audio b base bdi bdo blockquote body br button
canvas caption cite code col colgroup data datalist dd del details dfn dialog div dl dt em embed
fieldset figcaption figure footer form h1 h2 h3 h4 h5 h6 head header hgroup hr html i iframe img
input ins kbd label legend li link main map mark menu meta meter nav noscript object ol optgroup
option output p picture pre progress q rp rt ruby s samp script search section select slot small
source span strong style sub summary sup table tbody td template textarea tfoot th thead time
title tr track u ul var video wbr""".split()
)
MATHML = set(
    """math semantics annotation annotation-xml mrow mi mo mn ms mtext mspace msub msup
msubsup mfrac msqrt mroot mstyle mtable mtr mtd mlabeledtr mover munder munderover mpadded
mphantom menclose merror mmultiscripts mprescripts none maction mfenced""".split()
)
SVG = set(
    """svg g path circle ellipse rect line polyline polygon text tspan defs use symbol
clippath lineargradient radialgradient stop title desc""".split()
)
# attributes HTML allows without a value; any other attribute without one (`<Q x_i, K x_j>` reads
# as tag q with attributes "x_i,", "k", "x_j") marks text a browser took for a tag
BOOLEAN = set(
    """allowfullscreen async autofocus autoplay checked controls default defer disabled
formnovalidate hidden inert ismap itemscope loop multiple muted nomodule novalidate open
playsinline readonly required reversed selected""".split()
)


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.raw: list[str] = []
        self.math = 0

    def handle_starttag(self, tag, attrs):
        known = tag in HTML or tag in SVG or (tag in MATHML and (self.math or tag == "math"))
        odd = [name for name, value in attrs if value is None and name not in BOOLEAN]
        if not known or odd:
            line, column = self.getpos()
            self.raw.append(f"{line}:{column}: {self.get_starttag_text()}")
        if tag == "math":
            self.math += 1

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag == "math":
            self.math -= 1

    def handle_endtag(self, tag):
        if tag == "math" and self.math:
            self.math -= 1


def raw_tags(html: str) -> list[str]:
    """The start tags of `html` that no page means: text a browser would read as a tag and drop
    (`<x_i, x_j>`), each as "line:column: the tag's text"."""
    parser = _Tags()
    parser.feed(html)
    parser.close()
    return parser.raw


def load_hook(name: str):
    """docs/hooks/NAME.py as a module (mkdocs loads it by path, so does this)."""
    spec = importlib.util.spec_from_file_location(f"docs_{name}", ROOT / "docs" / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def markdown_pipeline():
    """A function turning a page's Markdown into the HTML the site shows: the Markdown
    extensions mkdocs reads from mkdocs.yml (with those it always adds) and their settings, then
    the math hook."""
    import markdown
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"))
    names, settings = list(config.markdown_extensions), dict(config.mdx_configs)
    math = load_hook("math")

    def convert(text: str, where: str = "") -> str:
        md = markdown.Markdown(extensions=names, extension_configs=settings)
        return math.render(md.convert(text), where)

    return convert


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


# run in the page once loaded: where the browser put the parts of the page's first display
# formula with a fraction, and how it displays the <math> element ("block math" where the
# browser lays out MathML; "inline" or "block" where it shows the tags' text as plain text)
_PROBE = """<script>
(function () {
  const box = e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.left, r.right]; };
  const maths = Array.from(document.querySelectorAll('math[display="block"]'));
  const math = maths.find(m => m.querySelector('mfrac'));
  const out = {formulas: document.querySelectorAll('math').length};
  if (math) {
    const frac = math.querySelector('mfrac'), sup = math.querySelector('msup');
    out.display = getComputedStyle(math).display;
    out.tex = (math.querySelector('annotation') || {}).textContent;
    out.numerator = box(frac.children[0]);
    out.denominator = box(frac.children[1]);
    if (sup) { out.base = box(sup.children[0]); out.script = box(sup.children[1]); }
    out.box = box(math);
  }
  document.body.setAttribute('data-probe', JSON.stringify(out));
})();
</script>"""


def probe_in_browser(page: Path, browser: str) -> dict:
    """Open a copy of `page` (beside it, so its styles load) headless in Chromium with a probe
    script, and return what the probe found (see _PROBE) once the page and its scripts ran."""
    copy = page.with_name(f"_probe_{page.name}")
    copy.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1200,2000",
            "--dump-dom",
            copy.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    copy.unlink()
    assert done.returncode == 0, done.stderr[-2000:]

    class Body(HTMLParser):
        found = None

        def handle_starttag(self, tag, attrs):
            if tag == "body":
                Body.found = dict(attrs).get("data-probe")

    Body().feed(done.stdout)
    assert Body.found, "the probe did not run: " + done.stdout[:500]
    return json.loads(Body.found)
