"""How numbers are shown: one module for every output that people read.

The terminal summary, ``report.md``, ``report.html``, the flows' artifacts and the
comparison tables all format a value, find its interval and decide whether a delta is
an improvement here, so the rules exist once:

* :func:`number`: a value as text (``missing`` where it is undefined; each output keeps
  its own dash or ``n/a`` and its own thousands separator, passed in; a unit follows a
  defined value only, so a missing distance reads ``n/a``, not ``n/a m``);
* :func:`interval_of`: the interval of key ``K`` in block ``B``, wherever the layout keeps
  it (SPEC 5.1: a group entry holds ``ci`` directly, the top level in ``bootstrap.ci``,
  a comparison entry as ``ci``);
* :func:`with_interval`: ``value [lower, upper]``;
* :class:`Shown`: how a family declares one of its keys (label with unit, which
  direction is better, whether it is a headline row and whether ``compare`` pairs it);
  :func:`is_worse` reads the direction;
* :class:`Row`: a headline row of a value nested in a block (an operating point), which
  a family adds beyond its declared keys.

The helpers that draw every registered family (:func:`headline`, :func:`compared_keys`,
:func:`better_of`) take the families as an argument: this module imports nothing of
evalcore, so the family modules can import it without a circle.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "HIGHER",
    "LOWER",
    "GROUPS",
    "OVERALL",
    "Shown",
    "Row",
    "row_text",
    "number",
    "is_undefined",
    "interval_of",
    "interval_text",
    "with_interval",
    "is_worse",
    "headline",
    "compared_keys",
    "better_of",
    "markdown_text",
]

HIGHER = "higher"
"""A larger value is better (rates, IoU, AP)."""
LOWER = "lower"
"""A smaller value is better (distances, errors, aurc)."""

GROUPS = "groups"
"""``compare`` pairs the key overall and in every stratum and size class."""
OVERALL = "overall"
"""``compare`` pairs the key overall only, when both runs have it."""


@dataclass(frozen=True, slots=True)
class Shown:
    """How one key of a family is shown, declared next to the family's numbers.

    Attributes
    ----------
    key : str
        The key in the summary (top level and group entries).
    label : str
        The row label of the reports, with the unit (``"Hausdorff distance, mean (m)"``).
    short : str, optional
        The label on the terminal line; None: the key is not on the default terminal line.
    better : {"higher", "lower"} or None
        Which direction is an improvement; None for a key that is neither (a count ratio).
    digits : int
        Decimals shown.
    headline : bool
        A row of the headline table of ``report.md`` and of the family's section.
    compared : {"groups", "overall"} or None
        Whether ``compare`` pairs the key, and where (:data:`GROUPS`, :data:`OVERALL`).
    """

    key: str
    label: str
    short: str | None = None
    better: str | None = HIGHER
    digits: int = 3
    headline: bool = True
    compared: str | None = None


@dataclass(frozen=True, slots=True)
class Row:
    """A headline row a family adds for a value that is not a key of the top level.

    Attributes
    ----------
    key : str
        Where the value is in ``metrics.json``, dotted (``operating_point.0.5.precision``):
        the name report.html gives it.
    label : str
        The row label of the reports.
    value : object
        A number, None when undefined, or a text shown as it is (``"not reached"``).
    ci : list or None
        Its ``[lower, upper]`` interval, None without one.
    digits : int
        Decimals shown.
    """

    key: str
    label: str
    value: object
    ci: list | None = None
    digits: int = 3


def is_undefined(value: object) -> bool:
    """None or a float that is not finite (NaN: null in JSON)."""
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def number(value: object, digits: int = 3, missing: str = "n/a", *, thousands: bool = False, text=str, unit: str = "") -> str:
    """A value as shown.

    Parameters
    ----------
    value : object
        A float (``digits`` decimals), an int, None or NaN (``missing``), or anything
        else (``text(value)``: the report escapes user strings this way).
    thousands : bool
        Group an integer's digits with commas (report.html).
    unit : str
        Shown after a defined value (``"m"``); a missing value is ``missing`` alone.

    Examples
    --------
    >>> number(0.12345), number(float("nan")), number(None, missing="–"), number(12345, thousands=True)
    ('0.123', 'n/a', '–', '12,345')
    >>> number(4.0, 2, unit="m"), number(None, 2, unit="m")
    ('4.00 m', 'n/a')
    """
    if is_undefined(value):
        return missing
    if unit:
        return f"{number(value, digits, missing, thousands=thousands, text=text)} {unit}"
    if isinstance(value, bool):
        return text(value)
    if isinstance(value, float) or (hasattr(value, "dtype") and getattr(value.dtype, "kind", "") == "f"):
        return f"{float(value):.{digits}f}"
    if thousands and (isinstance(value, int) or (hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "iu")):
        return f"{int(value):,}"
    return text(value)


def interval_of(block: Mapping | None, key: str) -> list | None:
    """The ``[lower, upper]`` of ``key`` in a block of the layout, None when it has none.

    A group entry (stratum, size class, AOI, sweep threshold, comparison entry) keeps its
    intervals in its own ``ci``; the top level keeps them in ``bootstrap.ci`` (SPEC 5.1).
    A comparison entry's ``ci`` is the interval itself (a list), not a mapping.
    """
    if not isinstance(block, Mapping):
        return None
    own = block.get("ci")
    if isinstance(own, (list, tuple)):
        return list(own)
    if not isinstance(own, Mapping) or not own:
        boot = block.get("bootstrap")
        own = boot.get("ci") if isinstance(boot, Mapping) else None
    if not isinstance(own, Mapping):
        return None
    ci = own.get(key)
    return None if ci is None else list(ci)


def interval_text(ci: object, digits: int = 3, missing: str = "n/a", *, defined_only: bool = False) -> str:
    """`` [lower, upper]`` (leading space), or ``""`` without an interval.

    ``defined_only``: leave out an interval with an undefined bound (the reports) instead
    of showing ``missing`` in its place (the terminal).
    """
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return ""
    if defined_only and any(is_undefined(v) for v in ci):
        return ""
    return f" [{number(ci[0], digits, missing)}, {number(ci[1], digits, missing)}]"


def with_interval(block: Mapping, key: str, digits: int = 3, missing: str = "n/a", *, defined_only: bool = False,
                  text=str) -> str:
    """``value [lower, upper]`` of ``key`` in ``block`` (:func:`interval_of`)."""
    return number(block.get(key), digits, missing, text=text) + interval_text(interval_of(block, key), digits, missing,
                                                                                defined_only=defined_only)


def row_text(row: Row, missing: str = "n/a", *, defined_only: bool = False, text=str) -> str:
    """A :class:`Row`'s ``value [lower, upper]`` (:func:`number`, :func:`interval_text`)."""
    return number(row.value, row.digits, missing, text=text) + interval_text(row.ci, row.digits, missing, defined_only=defined_only)


def is_worse(better: str | None, ci: object) -> bool:
    """A delta (new − old) whose whole interval lies on the worse side of zero."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or any(is_undefined(v) for v in ci):
        return False
    if better == HIGHER:
        return ci[1] < 0
    if better == LOWER:
        return ci[0] > 0
    return False


def _declared(families: Iterable[object]) -> Iterable[Shown]:
    for family in families:
        yield from getattr(family, "shown", ())


def headline(families: Iterable[object]) -> tuple[tuple[str, str], ...]:
    """``(key, label)`` of every headline key of the families, in their order."""
    return tuple((s.key, s.label) for s in _declared(families) if s.headline)


def compared_keys(families: Iterable[object], where: str) -> tuple[str, ...]:
    """The keys ``compare`` pairs overall and per group (:data:`GROUPS`) or overall only (:data:`OVERALL`)."""
    return tuple(s.key for s in _declared(families) if s.compared == where)


def better_of(families: Iterable[object], key: str) -> str | None:
    """The declared direction of ``key`` (:data:`HIGHER`, :data:`LOWER`, None when undeclared or neither)."""
    for s in _declared(families):
        if s.key == key:
            return s.better
    return None


# The characters Markdown (CommonMark and GitHub's tables) gives a meaning inside a line:
# HTML and entities (< > &), code (`), emphasis (* _ ~), links ([ ] !), cells (|) and
# the escape itself. A backslash before any ASCII punctuation shows it as itself.
_MD_SPECIAL = frozenset("\\`*_[]<>&|~!")
# Characters that would end a line or a table row, or reorder what is shown (bidi).
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _md_char(c: str) -> str:
    if c in _MD_SPECIAL:
        return "\\" + c
    if c < " ":
        return chr(0x2400 + ord(c))  # the control picture: NUL -> ␀, newline -> ␊
    if c == "\x7f":
        return "\u2421"  # ␡
    if c in _BIDI or unicodedata.category(c) in ("Cc", "Zl", "Zp"):
        return "\ufffd"
    return c


def markdown_text(value: object) -> str:
    r"""``str(value)`` as Markdown that shows exactly that text, on one line.

    ``< > & | ` * _ ~ [ ] !`` and the backslash get a backslash (Markdown's own escape,
    understood by every CommonMark renderer, inside a table cell too), so no text
    becomes HTML, an entity, code, emphasis, a link or a cell boundary. Control
    characters become their visible picture (NUL ``␀``, newline ``␊``, tab ``␉``,
    DEL ``␡``), and the other characters that break or reorder a line (C1 controls,
    the line and paragraph separators, bidirectional overrides) ``�``, so a row of a
    table stays one row.

    Examples
    --------
    >>> print(markdown_text("<img src=x onerror=alert(1)>"))
    \<img src=x onerror=alert(1)\>
    >>> print(markdown_text("a|b\nc"))
    a\|b␊c
    """
    return "".join(_md_char(c) if not c.isalnum() else c for c in str(value))
