"""The HTML pieces every section is made of, and the page they are collected in.

A number on the page is shown rounded by :func:`evalcore.present.number` and carries its
exact value in ``data-value`` (:func:`value_span`), which the tests parse back; an
interval follows its value in brackets. :class:`Page` collects what the sections add:
their HTML parts in page order and the :class:`Figure` values they drew.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field

import numpy as np

from evalcore.html_report.loading import finite
from evalcore.present import number

__all__ = ["Figure", "Page", "fmt", "esc", "prose", "plain", "group_label", "value_span", "ci_text", "with_ci", "table", "note"]


@dataclass
class Figure:
    """A drawn figure: its name in :data:`~evalcore.html_report.figures.FIGURES`, its PNG bytes and its caption.

    ``attrs`` are facts about the drawing that the page carries as ``data-`` attributes of
    the ``<figure>`` (e.g. the range of a colour scale), for whoever checks the figure
    against the run's files.
    """

    name: str
    png: bytes
    caption: str
    attrs: dict[str, object] = field(default_factory=dict)


@dataclass
class Page:
    """What the sections add: the HTML parts and the figures drawn."""

    parts: list[str] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)


def fmt(value: object, digits: int = 3) -> str:
    """A value as shown: booleans as yes/no, numbers rounded with thousands separators, "–" when undefined."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return number(value, digits, "–", thousands=True)


def esc(value: object) -> str:
    """Any value as HTML text, quotes escaped (safe inside attributes)."""
    return html.escape(str(value), quote=True)


_CODE = re.compile(r"`([^`]+)`")


def prose(text: str) -> str:
    """Text written in the Markdown of the terminal and report.md, as HTML: escaped, `` `code` `` as ``<code>``."""
    return _CODE.sub(lambda m: f"<code>{m.group(1)}</code>", esc(text))


def plain(value: object, key: str = "") -> str:
    """A value of a JSON file as a reader wants it, as HTML text.

    Booleans are yes/no, ``null`` is "—", a list is its items joined by commas, a
    mapping is ``key: value`` pairs. In a list of size-class edges (``key`` ``size_bins``
    or ending in ``edges_ha``), ``null`` is the infinite upper edge (JSON has no
    infinity) and is shown as "∞"; edges are in hectares.
    """
    edges = key == "size_bins" or key.endswith("edges_ha")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "—"
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "−∞"
    if isinstance(value, (list, tuple)):
        items = ["∞" if edges and v is None else plain(v) for v in value]
        return ", ".join(items) + (" ha" if edges and items else "")
    if isinstance(value, dict):
        return ", ".join(f"{esc(k)}: {plain(v, str(k))}" for k, v in value.items())
    if edges and isinstance(value, str) and value == "auto":
        return "auto (a 1-2-5 series of hectares)"
    return esc(value)


def group_label(group: object, grouping: str) -> str:
    """A group's key as shown (plain text): a size class ``"10-inf"`` as ``"10-∞ ha"``, any other key as it is."""
    if grouping != "per_size_class":
        return str(group)
    return str(group).replace("inf", "∞") + " ha"


def _raw(value: object) -> str:
    """The exact value for ``data-value``: ``repr`` of a float round-trips, ``null`` when undefined."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    v = finite(value)
    return "null" if v is None else repr(v)


def value_span(key: str, value: object, digits: int = 3) -> str:
    """A number as shown, with its exact value in ``data-value`` (the tests parse it back)."""
    return f'<span class="v" data-key="{esc(key)}" data-value="{esc(_raw(value))}">{esc(fmt(value, digits))}</span>'


def ci_text(ci: object) -> str:
    """`` [lower, upper]`` of an interval as plain text; empty when it is not two finite numbers."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or finite(ci[0]) is None or finite(ci[1]) is None:
        return ""
    return f" [{fmt(float(ci[0]))}, {fmt(float(ci[1]))}]"


def with_ci(key: str, value: object, ci: object) -> str:
    """:func:`value_span` of a value followed by its interval's bounds, each a ``data-value`` of its own."""
    text = value_span(key, value)
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and finite(ci[0]) is not None and finite(ci[1]) is not None:
        text += f' <span class="ci">[{value_span(key + ".ci_lower", ci[0])}, {value_span(key + ".ci_upper", ci[1])}]</span>'
    return text


def table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    """An HTML table; the header is escaped here, the cells are HTML already."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def note(text: str) -> str:
    """The note that stands where something is absent, saying why (`` `code` `` as in :func:`prose`)."""
    return f'<p class="absent">{prose(text)}</p>'
