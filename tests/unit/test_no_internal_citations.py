"""What a user reads cites pages a user can open (issue 33, item 13).

The evaluation contract's working copy (``SPEC.md``, its sections "SPEC 6.3") and the
seed documents ("seed 001") live outside the repository. Help texts, error messages,
the reports' text, the example gates and the docs cite ``docs/`` instead. Internal
docstrings and comments may keep citing them (they are for the maintainers).

* every ``--help`` of the command line;
* every string literal in evalcore/ and flows/ that is not a docstring (error messages,
  help texts, Prefect parameter descriptions, the report's and the terminal's text);
* the Markdown report of a run with every option (the ``full`` golden metrics);
* docs/, README.md, CHANGELOG.md and every text file of deploy/.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# "SPEC", "SPEC.md", "SPEC 6.3", "seed 001", "seeds 001-004"; not Kubernetes' "spec:" nor "--seed 1".
CITATION = re.compile(r"\bSPEC\b|\b[Ss]eeds? 0\d\d")


def _docstring_nodes(tree: ast.AST) -> set[int]:
    """The string statements of a module: docstrings and attribute docstrings (not shown to a user)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def _user_strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstring_nodes(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


def test_the_pattern_finds_what_it_should():
    for text in ("see SPEC 6.3", "(SPEC.md, agribound)", "seed 001's definition", "seeds 001-004", "Seed 002"):
        assert CITATION.search(text), text
    for text in ("spec:", "--seed 1", "the seed of the bootstrap", "specification", "seed 42"):
        assert not CITATION.search(text), text


def test_no_help_text_cites_them():
    from evalcore.cli.parser import build_parser

    parser = build_parser()
    texts = {"evalcore": parser.format_help()}
    for action in parser._actions:  # the subcommands' own parsers
        if isinstance(action, argparse._SubParsersAction):
            texts.update({f"evalcore {name}": sub.format_help() for name, sub in action.choices.items()})
    assert len(texts) > 5
    found = {name: CITATION.findall(text) for name, text in texts.items() if CITATION.search(text)}
    assert not found, found


def test_no_message_or_report_text_in_the_code_cites_them():
    files = sorted((ROOT / "evalcore").rglob("*.py")) + sorted((ROOT / "flows").rglob("*.py"))
    assert len(files) > 50
    found = [f"{path.relative_to(ROOT)}:{line}: {text[:80]!r}" for path in files for line, text in _user_strings(path) if CITATION.search(text)]
    assert not found, found


def test_the_markdown_report_cites_none():
    from evalcore.report import render_report

    metrics = json.loads((ROOT / "tests" / "golden" / "full" / "metrics.json").read_text(encoding="utf-8"))
    text = render_report(metrics, inputs={"predicted": {"path": "p.parquet", "sha256": "ab" * 32}, "reference": {"path": "r.parquet", "sha256": "cd" * 32}})
    assert len(text) > 1000
    assert not CITATION.search(text), CITATION.findall(text)


@pytest.mark.parametrize(
    "path",
    sorted(p for p in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "deploy").rglob("*")]
           if p.is_file() and p.suffix in (".md", ".yaml", ".yml", ".json", ".toml", ".sh", ".txt", "")),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_user_document_cites_them(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    found = [f"{n}: {line.strip()[:100]}" for n, line in enumerate(text.splitlines(), 1) if CITATION.search(line)]
    assert not found, found
