"""The command's process gives freed memory back (evalcore.cli.allocator).

Each case runs in a fresh interpreter: the allocator's thresholds are process-wide and
glibc's dynamic ones depend on what the process freed before.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")

# 64 blocks of 4 MiB, every other one freed, after an 8 MiB block was freed (which
# raises glibc's default mmap threshold above 4 MiB, so the blocks come from the heap
# and their holes stay resident). With a fixed trim threshold each block is a mapping
# of its own, unmapped when freed: 128 MiB stay instead of 256.
PROBE = textwrap.dedent(
    """
    import sys
    import numpy as np

    def rss_mib():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

    how = sys.argv[1]
    if how == "function":
        from evalcore.cli.allocator import return_freed_memory
        print(return_freed_memory())
    elif how == "command":
        from evalcore.cli import main
        main([])  # a bare `evalcore`: prints the commands
    np.ones(1 << 20).sum()
    before = rss_mib()
    blocks = [np.ones(1 << 19) for _ in range(64)]
    kept = blocks[1::2]
    del blocks
    print(round(rss_mib() - before))
    """
)


def _probe(how: str, **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_TRIM_THRESHOLD_"} | env
    done = subprocess.run([sys.executable, "-c", PROBE, how], capture_output=True, text=True, env=environ, timeout=120, check=True)
    return done.stdout.split()


def test_glibc_default_keeps_the_freed_holes_resident():
    # The premise: without the setting, the freed half stays in the process.
    assert int(_probe("none")[-1]) >= 240


def test_the_fixed_threshold_gives_them_back():
    set_, grown = _probe("function")
    assert set_ == "True"
    assert int(grown) <= 140


def test_the_command_line_sets_it():
    assert int(_probe("command")[-1]) <= 140


def test_a_users_own_setting_stands():
    # glibc read it at start (here the same value, so the blocks are given back too);
    # evalcore does not call mallopt over it.
    set_, grown = _probe("function", MALLOC_TRIM_THRESHOLD_="65536")
    assert set_ == "False"
    assert int(grown) <= 140


ARROW_PROBE = textwrap.dedent(
    """
    import os
    import sys

    if sys.argv[1] == "pyarrow first":
        import pyarrow
    import evalcore.cli
    import pyarrow

    print(pyarrow.default_memory_pool().backend_name, os.environ.get("ARROW_DEFAULT_MEMORY_POOL", "-"))
    """
)


def _arrow_probe(how: str, **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"} | env
    done = subprocess.run([sys.executable, "-c", ARROW_PROBE, how], capture_output=True, text=True, env=environ, timeout=120, check=True)
    return done.stdout.split()


def test_the_command_line_puts_arrow_on_the_system_allocator():
    # ... and takes the variable away again: the workers it starts keep Arrow's default.
    assert _arrow_probe("") == ["system", "-"]


def test_arrow_imported_before_keeps_its_pool():
    pool, env = _arrow_probe("pyarrow first")
    assert pool != "system" and env == "-"


def test_a_users_arrow_pool_stands():
    assert _arrow_probe("", ARROW_DEFAULT_MEMORY_POOL="mimalloc") == ["mimalloc", "mimalloc"]
