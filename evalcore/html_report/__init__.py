"""``report.html``: one self-contained page per run directory, built from its files alone.

:func:`build_report` reads a run directory (``metrics.json`` and, when present,
``manifest.json``, ``acceptance-gates.json``, ``evaluation-contract.json``,
``error-taxonomy.json``, ``paired.json``, ``tiles.parquet``, ``fields/`` and
``predictions/``), draws the figures with matplotlib and geopandas, saves each as a PNG
in ``RUN_DIR/figures/`` and writes ``RUN_DIR/report.html`` with the same PNGs inlined as
``data:`` URIs, inline CSS and no script: the page opens offline and makes no network
request. It never recomputes a metric; every number on the page is read from the run's
files. What the page shows and how it samples for large runs: ``docs/report.md``.

The package, bottom floor first:

* :mod:`~evalcore.html_report.loading`: reading the run directory into what the page needs
  (:class:`RunFiles`, the tile table, the rows of groups and worst tiles);
* :mod:`~evalcore.html_report.markup`: the HTML pieces (numbers with their exact values,
  intervals, tables, notes) and the :class:`~evalcore.html_report.markup.Page` they are
  collected in;
* :mod:`~evalcore.html_report.figures`: the figures drawn with matplotlib, and their
  embedding as ``data:`` URIs;
* :mod:`~evalcore.html_report.sections`: the page's sections, headline to paired comparison,
  the registered families' sections drawn from their declarations;
* :mod:`~evalcore.html_report.overlays`: the map overlays of reference and predicted
  polygons, read and drawn window by window;
* :mod:`~evalcore.html_report.page`: the skeleton, the CSS, the order of the sections and
  :func:`build_report`.
"""

from evalcore.html_report.figures import FIGURES
from evalcore.html_report.loading import RunFiles, group_rows, load_run, worst_tile_rows
from evalcore.html_report.overlays import PREDICTION_COLOUR, REFERENCE_COLOUR
from evalcore.html_report.page import build_report

__all__ = [
    "build_report",
    "load_run",
    "RunFiles",
    "FIGURES",
    "group_rows",
    "worst_tile_rows",
    "REFERENCE_COLOUR",
    "PREDICTION_COLOUR",
]
