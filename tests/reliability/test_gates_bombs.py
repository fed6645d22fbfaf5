"""Hostile gates files: ``evalcore gate`` ends each with exit 2 and one short line naming it.

A gates file is small (a few dozen rules), so evalcore bounds what it will read before
it builds anything from it (:func:`evalcore.gates.load_gates`): the file's size, the
nesting depth of its YAML, and the number of values once its aliases are expanded; and
no message quotes more than a few dozen characters of a value. Every case runs the real
command in a subprocess with a timeout, so a hang fails the test instead of the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.cli  # each test runs the evalcore command in a subprocess (tests/markers.py)
SHORT = 300  # characters: the whole error line, the file's name included


def _run_dir(tmp_path: Path) -> Path:
    """A run directory as ``evalcore gate`` reads it: a metrics.json written by hand."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"recall": 0.7, "count_reference": 10}), encoding="utf-8")
    return run


def _gate(tmp_path: Path, gates: Path, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evalcore.cli", "gate", str(_run_dir(tmp_path)), str(gates), "-q"],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )


def _assert_one_short_line(proc: subprocess.CompletedProcess, gates: Path, says: str) -> None:
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[:500])
    assert len(lines) == 1, proc.stderr[:500]
    assert len(lines[0]) < SHORT, lines[0][:500]
    assert str(gates) in lines[0] and says in lines[0], lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def _laughs(depth: int) -> str:
    """Nested anchors inside the id: 9 ** (depth + 1) strings once expanded, a few hundred bytes written."""
    parts = ['&a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    parts += [f"&a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, depth + 1)]
    return "[" + ", ".join(parts) + "]"


def _file(tmp_path: Path, text: str, name: str = "gates.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


RULE_TAIL = "    metric: recall\n    op: '>='\n    threshold: 0.5\n"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("depth", [6, 9])
def test_an_alias_bomb_in_a_rule_id_is_refused_quickly(tmp_path, depth):
    # Depth 6 printed a 39 MB error line before; depth 9 (3.9e9 strings) never ended.
    gates = _file(tmp_path, f"gates:\n  - id: {_laughs(depth)}\n{RULE_TAIL}")
    _assert_one_short_line(_gate(tmp_path, gates), gates, "alias")


@pytest.mark.timeout(60)
def test_a_merge_key_bomb_is_refused(tmp_path):
    # Merge keys copy a mapping's pairs into another one: doubling at every level.
    lines = ["x0: &x0 {a: 1, b: 2}"] + [f"x{i}: &x{i} {{<<: [*x{i - 1}, *x{i - 1}], k{i}: 1}}" for i in range(1, 40)]
    gates = _file(tmp_path, "gates:\n  - id: G\n" + RULE_TAIL + "    use: {" + ", ".join(lines) + "}\n")
    _assert_one_short_line(_gate(tmp_path, gates), gates, "alias")


@pytest.mark.timeout(60)
def test_deeply_nested_brackets_are_refused(tmp_path):
    # Was exit 1 "RecursionError: maximum recursion depth exceeded", naming no file.
    gates = _file(tmp_path, "gates: " + "[" * 100_000 + "]" * 100_000 + "\n")
    _assert_one_short_line(_gate(tmp_path, gates), gates, "nest")


@pytest.mark.timeout(60)
def test_deeply_nested_block_mappings_are_refused(tmp_path):
    # 1,000 levels, one space deeper each (600 kB)
    text = "gates:\n  - id: G\n" + RULE_TAIL + "    use:\n" + "".join(" " * (k + 5) + "k:\n" for k in range(1_000)) + " " * 1_005 + "1\n"
    gates = _file(tmp_path, text)
    _assert_one_short_line(_gate(tmp_path, gates), gates, "nest")


@pytest.mark.timeout(60)
def test_a_file_over_the_size_limit_is_refused_unread(tmp_path):
    # 2 MiB of comment: valid YAML, but no gates file is that large.
    gates = _file(tmp_path, "gates:\n  - id: G\n" + RULE_TAIL + ("# " + "x" * 1022 + "\n") * 2048)
    _assert_one_short_line(_gate(tmp_path, gates), gates, "MiB")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("field, value", [
    ("id", "[" + ", ".join(["lol"] * 50_000) + "]"),        # a list id of 50,000 items (300 kB)
    ("id", "{" + ", ".join(f"k{i}: v" for i in range(20_000)) + "}"),
    ("metric", "'" + "m" * 500_000 + "..x'"),            # a long path with an empty segment
    ("op", "'" + ">" * 500_000 + "'"),
    ("threshold", "'" + "9" * 400_000 + "x'"),
])
def test_a_huge_value_is_cut_in_the_message(tmp_path, field, value):
    rule = {"id": "G", "metric": "recall", "op": "'>='", "threshold": "0.5"}
    rule[field] = value
    text = "gates:\n  - " + "\n    ".join(f"{k}: {v}" for k, v in rule.items()) + "\n"
    gates = _file(tmp_path, text)
    proc = _gate(tmp_path, gates)
    _assert_one_short_line(proc, gates, "rule #1" if field == "id" else "rule 'G' (#1)")


@pytest.mark.timeout(60)
def test_a_long_duplicate_key_is_cut_in_the_message(tmp_path):
    key = "k" * 1_000  # YAML's longest plain key
    gates = _file(tmp_path, f"gates:\n  - id: G\n{RULE_TAIL}    {key}: 1\n    {key}: 2\n")
    _assert_one_short_line(_gate(tmp_path, gates), gates, "twice")


@pytest.mark.timeout(60)
def test_a_few_aliases_in_a_sound_file_still_work(tmp_path):
    # An anchored minimum shared by two rules: 0.7 >= 0.5 passes, 0.7 >= 0.9 fails -> exit 1.
    text = (
        "gates:\n"
        "  - {id: A, metric: recall, op: '>=', threshold: 0.5, min_support: &n 5}\n"
        "  - {id: B, metric: recall, op: '>=', threshold: 0.9, min_support: *n}\n"
    )
    gates = _file(tmp_path, text)
    proc = _gate(tmp_path, gates)
    assert proc.returncode == 1, proc.stderr
    written = json.loads((tmp_path / "run" / "acceptance-gates.json").read_text(encoding="utf-8"))
    assert [(r["id"], r["state"], r["min_support"]) for r in written["rules"]] == [("A", "pass", 5), ("B", "fail", 5)]

