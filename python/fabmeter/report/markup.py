"""HTML built from values that may come from a hostile results folder.

Every piece of the page is made by `el()`: a child or attribute value that
is not already `Html` is escaped, so text read from run.json, peers.json,
index.json or mesh.json can only ever be text. Markup written by the report
itself (the style sheet, the table's sort script) enters through `trusted()`,
which takes only constants of this package, never a value read from a file.
"""

from __future__ import annotations

import base64
import html
from typing import Iterable, Optional, Union


class Html(str):
    """Markup already built by el() (or a trusted constant): inserted as it is."""


Child = Union["Html", str, int, float, None, list, tuple]


def text(value) -> Html:
    """Any value as escaped text."""
    return value if isinstance(value, Html) else Html(html.escape(str(value), quote=True))


def trusted(constant: str) -> Html:
    """A constant of the report's own source (CSS, script): never a value read from a file."""
    return Html(constant)


def join(children: Iterable[Child], sep: str = "") -> Html:
    """Children side by side, each escaped unless it is Html; None and nested lists flattened."""
    out = []
    for c in children:
        if c is None:
            continue
        if isinstance(c, (list, tuple)):
            out.append(join(c))
        else:
            out.append(text(c))
    return Html(text(sep).join(out))


def el(tag: str, *children: Child, **attrs) -> Html:
    """<tag attrs>children</tag>. Attribute names as keywords (`class_` for class, `data_x` for data-x); a value
    of None or False leaves the attribute out, True writes it bare; every value is escaped."""
    words = [tag]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        name = key.rstrip("_").replace("_", "-")
        words.append(name if value is True else f'{name}="{text(value)}"')
    opening = "<" + " ".join(words) + ">"
    if tag in VOID:
        return Html(opening)
    return Html(f"{opening}{join(children)}</{tag}>")


VOID = {"img", "meta", "br", "hr", "link", "input"}


def img(data: bytes, alt: str, caption: str = "", wide: bool = False, anchor: Optional[str] = None) -> Html:
    """A PNG figure, inlined, with its caption."""
    src = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return el("figure", el("img", alt=alt, src=src), el("figcaption", caption) if caption else None,
              class_="wide" if wide else "", id=anchor)
