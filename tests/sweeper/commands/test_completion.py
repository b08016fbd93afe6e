"""`sweeper completion`: the generated scripts are valid shell and know every command and flag."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from sweeper.cli import main
from sweeper.commands.parser import COMMANDS


def test_bash_completion_is_valid_bash_and_lists_every_command(capsys, tmp_path):
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    for command in COMMANDS:
        assert command in script
    assert "--dry-run" in script and "--retry-failed" in script  # launch's own flags
    path = tmp_path / "sweeper.bash"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_completing_a_subcommand_in_a_real_bash(capsys, tmp_path):
    assert main(["completion", "bash"]) == 0
    path = tmp_path / "sweeper.bash"
    path.write_text(capsys.readouterr().out)
    probe = (f"source {path}; COMP_WORDS=(sweeper lau); COMP_CWORD=1; COMP_LINE='sweeper lau'; COMP_POINT=11; "
             "_shtab_sweeper; printf '%s\\n' \"${COMPREPLY[@]}\"")
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True)
    assert "launch" in out.stdout.split(), out.stderr


def test_an_unknown_shell_is_refused_with_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["completion", "fish"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
