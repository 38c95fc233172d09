"""mkdocs hook: the pages' mathematics as MathML, written when the site is built, so that a
browser renders it with no script and no network.

The pages write TeX between dollars: `$\\langle x_i, x_j \\rangle$` inline, `$$ ... $$` on lines
of their own for a display (the same syntax GitHub renders). pymdown-extensions' arithmatex
(mkdocs.yml, `generic: true`) finds the formulas outside code and leaves each as
`<span class="arithmatex">\\( TeX \\)</span>` or `<div class="arithmatex">\\[ TeX \\]</div>`;
this hook turns each into a `<math>` element with latex2mathml, keeping the TeX as the
element's annotation (what a reader copies or a screen reader may read). Chromium, Firefox and
Safari lay out MathML natively.

A formula latex2mathml cannot read, or one with a command it does not know (which it would leave
as a literal `\\name`), is a warning, so `mkdocs build --strict` fails on it.
"""

from __future__ import annotations

import html
import logging
import re

log = logging.getLogger("mkdocs.hooks.math")

# arithmatex's generic output: the TeX, HTML-escaped, inside \( \) or \[ \]
INLINE = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.S)
BLOCK = re.compile(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', re.S)
UNKNOWN = re.compile(r">(\\[A-Za-z]+)<")  # latex2mathml leaves an unknown command as its name
STRAY = re.compile(r"<mi>&</mi>")  # and an alignment & of an environment it cannot lay out


class MathError(ValueError):
    """A formula that does not convert to MathML."""


def mathml(tex: str, display: str = "inline") -> str:
    """The `<math>` element of one TeX formula (display "inline" or "block"), with the TeX kept
    as its x-tex annotation."""
    from latex2mathml.converter import convert

    try:
        out = convert(tex, display=display)
    except Exception as exc:  # latex2mathml raises its own error types for malformed TeX
        raise MathError(f"cannot convert ${tex}$: {exc}") from exc
    unknown = UNKNOWN.findall(out)
    if unknown:
        raise MathError(f"unknown TeX command {', '.join(unknown)} in ${tex}$")
    if STRAY.search(out):
        raise MathError(f"an alignment & latex2mathml cannot lay out in ${tex}$ (write one display per line)")
    head, _, rest = out.partition(">")
    body = rest[: -len("</math>")]
    note = f'<annotation encoding="application/x-tex">{html.escape(tex.strip())}</annotation>'
    return f"{head}><semantics>{body}{note}</semantics></math>"


def render(page_html: str, where: str = "") -> str:
    """A page's HTML with every arithmatex formula replaced by MathML; a formula that does not
    convert stays as TeX and is logged as a warning."""

    def replace(display, tag):
        def one(match):
            tex = html.unescape(match.group(1))
            try:
                return f'<{tag} class="arithmatex">{mathml(tex, display)}</{tag}>'
            except MathError as exc:
                log.warning("%s: %s", where or "page", exc)
                return match.group(0)

        return one

    page_html = BLOCK.sub(replace("block", "div"), page_html)
    return INLINE.sub(replace("inline", "span"), page_html)


def on_page_content(html_text, page, config, files):
    """mkdocs event: the page's body, after Markdown."""
    return render(html_text, page.file.src_uri)
