"""Every error a user can cause from the command line ends on one line, never a traceback:
missing benchmark data, database URLs that are not supported, not parseable or not reachable,
a config file that is not there, bad flags. Each command runs as `tollgate` runs it (the lazy
group, click's own error handling); one case runs as a real process, as a user's shell does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gateway.cli import main

ROOT = Path(__file__).resolve().parents[3]
RUN = "from gateway.cli import main; main(prog_name='tollgate')"
BAD_URLS = {
    "mysql://root@127.0.0.1/test": "unsupported database URL",
    "notaurl": "not a database URL",
    "postgresql://postgres@127.0.0.1:1/nowhere": "database un(reachable|available)",
    "sqlite:////nonexistent-dir/x.db": "database",
}
DB_COMMANDS = (["tenants", "list"], ["keys", "list"], ["logs"], ["db", "current"],
               ["router", "history"], ["tenants", "create", "acme", "--budget-usd", "1"])


def _one_line_error(args: list[str], env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code not in (0, None), (args, result.output)
    assert isinstance(result.exception, SystemExit), (args, repr(result.exception))
    assert "Traceback" not in result.output, (args, result.output)
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("Error: "), (args, result.output)
    return last


@pytest.mark.parametrize("url", sorted(BAD_URLS))
def test_a_bad_database_url_is_one_line_in_every_command(url: str) -> None:
    for cmd in DB_COMMANDS:
        line = _one_line_error([*cmd, "--database-url", url])
        assert re.search(BAD_URLS[url], line), (cmd, line)
        assert len(line) < 400, line


@pytest.mark.parametrize("args", [
    ["train", "--dataset", "all", "--out", "{tmp}/router"],
    ["train", "--dataset", "routerbench", "--out", "{tmp}/router"],
    ["eval", "--dataset", "routerbench"],
    ["eval", "--dataset", "all"],
    ["simulate"],
])
def test_missing_benchmark_data_names_the_flag(args: list[str], tmp_path: Path) -> None:
    args = [a.format(tmp=tmp_path) for a in args] + ["--data-dir", str(tmp_path / "none")]
    line = _one_line_error(args)
    assert "--data-dir" in line, line


@pytest.mark.parametrize("args", [
    ["serve", "--config", "/nonexistent/config.yaml"],
    ["eval", "--dataset", "/nonexistent/observed.csv"],
    ["train", "--dataset", "nope", "--out", "x"],
    ["logs", "--since", "banana", "--database-url", "sqlite://"],
    ["tenants", "create", "acme", "--budget-usd", "lots"],
    ["serve", "--workers", "0"],
    ["no-such-command"],
    ["models", "add"],
])
def test_bad_flags_and_files_are_one_line(args: list[str]) -> None:
    _one_line_error(args)


def test_a_mysql_url_from_the_environment_is_one_line_in_a_real_process() -> None:
    """A real process, as typed in a shell: stderr is the one line, stdout empty."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOLLGATE_DATABASE_URL": "mysql://u@h/db",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("TOLLGATE_DEBUG", None)
    out = subprocess.run([sys.executable, "-c", RUN, "tenants", "list"], env=env,
                         capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert out.returncode == 1
    assert out.stderr.strip() == ("Error: unsupported database URL mysql://u@h/db: use "
                                  "sqlite:///path or postgresql://user@host/db"), out.stderr


def test_debug_keeps_the_traceback() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOLLGATE_DEBUG": "1"}
    out = subprocess.run([sys.executable, "-c", RUN, "tenants", "list",
                          "--database-url", "mysql://u@h/db"], env=env,
                         capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert out.returncode == 1 and "Traceback" in out.stderr
