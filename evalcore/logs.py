"""What the command line prints while it works, and where the rest of the log goes.

:func:`configure_logging` is called once by :func:`evalcore.cli.main` after the
arguments are parsed.
"""

from __future__ import annotations

import logging

__all__ = ["configure_logging"]


def configure_logging(verbosity: int = 0) -> None:
    """Set the log levels of evalcore and of the libraries it drives.

    Parameters
    ----------
    verbosity : int
        0: warnings that matter only; 1 (``-v``): evalcore's progress lines and the
        libraries' warnings; 2 (``-vv``): everything at INFO.
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    level = logging.WARNING if verbosity <= 0 else logging.INFO
    for noisy in ("distributed", "bokeh", "tornado"):
        logging.getLogger(noisy).setLevel(level if verbosity >= 2 else logging.WARNING)
    logging.getLogger("evalcore").setLevel(level)
