"""`tollgate --help` and `--version` answer at once: nothing heavy is imported for them.

Timing is measured by bench/serving/cli_startup.py (wall-clock bounds do not belong in tests); here
the cause is checked: which modules a fresh interpreter has loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner

from gateway.cli import COMMANDS, load_command, main

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "sklearn", "litellm", "fastapi", "sentence_transformers", "pandas")


def _loaded_after(code: str) -> list[str]:
    probe = (f"import sys\n{code}\nimport json\n"
             f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_cli_loads_nothing_heavy() -> None:
    assert _loaded_after("import gateway.cli") == []


def test_help_and_version_load_nothing_heavy() -> None:
    for args in (["--help"], ["--version"]):
        code = (f"from gateway.cli import main\ntry:\n    main({args!r}, prog_name='tollgate')\n"
                "except SystemExit:\n    pass")
        assert _loaded_after(code) == [], args


def test_every_commands_help_loads_nothing_heavy() -> None:
    """`tollgate <command> [<subcommand>] --help` answers without torch, litellm, FastAPI ...
    (`tollgate models --help` took 6.9 s when it imported litellm)."""
    import itertools

    for name in COMMANDS:
        cmd = load_command(name)
        subs = list(getattr(cmd, "commands", {}))[:2]  # a group: its own help and two others
        for args in itertools.chain([[name, "--help"]], ([name, s, "--help"] for s in subs)):
            code = (f"from gateway.cli import main\ntry:\n    main({args!r}, prog_name='tollgate')"
                    "\nexcept SystemExit:\n    pass")
            assert _loaded_after(code) == [], args


def test_the_listing_matches_the_real_commands() -> None:
    """The short help shown by `tollgate --help` is each command's own first line."""
    for name, (_, _, short) in COMMANDS.items():
        cmd = load_command(name)
        assert isinstance(cmd, click.Command) and cmd.name == name
        assert cmd.get_short_help_str(limit=300) == short, name


def test_help_lists_every_command_and_a_command_runs() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in result.output
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and "tollgate, version" in result.output
    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0 and "--config" in result.output


def test_a_config_error_in_any_command_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("model_list: []\nrouters: {}\n")  # a typo of routes
    result = CliRunner().invoke(main, ["tenants", "list", "--config", str(bad)])
    assert result.exit_code == 1, result.output
    assert result.output.strip() == f"Error: {bad}: unknown key 'routers'"
