"""A bare ``evalcore`` and ``evalcore --version`` tell a newcomer what the tool is (issue 33, item 5)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from evalcore.cli import main
from tests.common import run_cli

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("evaluate", "run", "compare", "gate", "report", "verify", "review", "synth")


def _project_version() -> str:
    """The version the package is built with: pyproject.toml takes it from evalcore/_version.py."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "evalcore._version.__version__"}
    namespace: dict[str, str] = {}
    exec((ROOT / "evalcore" / "_version.py").read_text(encoding="utf-8"), namespace)
    return namespace["__version__"]


def test_bare_evalcore_lists_every_command_with_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert f"evalcore {_project_version()}" in out
    for command in COMMANDS:
        assert re.search(rf"^\s+{command}\s+\S", out, flags=re.M), command
    assert "evalcore COMMAND -h" in out


def test_version_is_the_projects(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.strip() == f"evalcore {_project_version()}"


@pytest.mark.cli
def test_the_installed_command_answers_both() -> None:
    bare = run_cli()
    version = run_cli("--version")
    assert bare.returncode == 0 and "synth" in bare.stdout and bare.stderr == ""
    assert version.returncode == 0 and version.stdout.strip() == f"evalcore {_project_version()}"


@pytest.mark.parametrize(
    "flag, value, parameter",
    [("--iou-threshold", "1.5", "iou_threshold"), ("--bootstrap", "-5", "bootstrap"), ("--tversky-alpha", "-1", "tversky_alpha")],
)
def test_errors_name_the_flag_on_the_cli_and_the_parameter_in_the_library(
    flag: str, value: str, parameter: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from evalcore.options import check_options

    assert main(["evaluate", "-p", "p.parquet", "-r", "r.parquet", "-o", "m.json", flag, value]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("evalcore: error: evaluate: ") and flag in line and parameter not in line.replace(flag, ""), line
    with pytest.raises(ValueError, match=parameter):
        check_options(**{parameter: float(value) if "." in value else int(value)})


@pytest.mark.cli
def test_run_checks_what_needs_no_data_before_importing_prefect(tmp_path: Path) -> None:
    """A refused `run` answers before the flows package and Prefect are imported (issue 33, item 6)."""
    import subprocess
    import sys

    (tmp_path / "taken").write_text("a file, not a directory\n")
    code = (
        "import sys\n"
        "from evalcore.cli import main\n"
        f"status = main(['run', '-p', 'p.parquet', '-r', 'r.parquet', '-o', {str(tmp_path / 'taken')!r}])\n"
        "print(status, 'prefect' in sys.modules, 'flows.cli' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.stdout.split() == ["2", "False", "False"], (done.stdout, done.stderr)
    assert "-o/--output-dir" in done.stderr and "is a file" in done.stderr


def test_a_run_directory_may_have_missing_parents_but_not_under_a_file(tmp_path: Path) -> None:

    from evalcore.cli.checks import check_output_dir
    from evalcore.errors import EvalInputError

    check_output_dir(str(tmp_path / "runs" / "2026" / "a"), "-o/--output-dir", create_parents=True)
    assert not (tmp_path / "runs").exists()  # checked, not created: the flow creates it
    with pytest.raises(EvalInputError, match="does not exist"):
        check_output_dir(str(tmp_path / "runs" / "a"), "-o/--output-dir")
    (tmp_path / "file").write_text("x")
    with pytest.raises(EvalInputError, match="is a file"):
        check_output_dir(str(tmp_path / "file" / "a" / "b"), "-o/--output-dir", create_parents=True)
