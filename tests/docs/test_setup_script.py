"""`tests/setup.sh`, the README's system-requirement step: nothing when a Chromium is on PATH; Debian's
`chromium` through apt-get as root or through sudo otherwise; a clear failure naming the requirement
where neither is possible. The real apt-get cannot run in a test (it would install a browser), so the
machine is a PATH of small stand-in programs that record how they were called."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.docs.pages import ROOT

SCRIPT = ROOT / "tests" / "setup.sh"
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")


def _tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!{folder / 'bash'}\n{body}\n", encoding="utf-8")
    path.chmod(0o755)


def _machine(tmp_path: Path, *, uid: int, apt: bool, sudo: bool | None, chromium: bool = False) -> Path:
    """A bin folder: `id`, and optionally `apt-get` (whose install puts a `chromium` beside it), `sudo`
    (None: absent; False: asks for a password), `chromium`. Each call is logged to calls.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    _tool(bin_dir, "id", f'[ "$1" = "-u" ] && echo {uid}')
    _tool(bin_dir, "true", "exit 0")
    shutil.copy2(shutil.which("chmod") or "/bin/chmod", bin_dir / "chmod")
    if apt:
        _tool(bin_dir, "apt-get", f'echo "apt-get $*" >> {log}\n'
                                  f'case "$*" in *install*chromium*) printf "#!{bin_dir}/bash\\n" > {bin_dir}/chromium; '
                                  f'chmod +x {bin_dir}/chromium;; esac')
        _tool(bin_dir, "env", 'while [ "${1#*=}" != "$1" ]; do export "$1"; shift; done; exec "$@"')
    if sudo is not None:
        _tool(bin_dir, "sudo", f'echo "sudo $*" >> {log}\n' + ('shift; exec "$@"' if sudo else "exit 1"))
    if chromium:
        _tool(bin_dir, "chromium", "exit 0")
    return bin_dir


def _run(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    # PATH is the stand-ins and a copy of bash only: the machine's own chromium, apt-get and sudo are hidden
    shutil.copy2(BASH, bin_dir / "bash")
    return subprocess.run([str(bin_dir / "bash"), str(SCRIPT)], env={"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/")},
                          capture_output=True, text=True, timeout=60)


def _calls(tmp_path: Path) -> str:
    log = tmp_path / "calls.log"
    return log.read_text() if log.exists() else ""


def test_nothing_to_do_when_chromium_is_there(tmp_path):
    done = _run(_machine(tmp_path, uid=1000, apt=True, sudo=None, chromium=True))
    assert done.returncode == 0, done.stderr
    assert _calls(tmp_path) == ""


def test_root_installs_debians_chromium(tmp_path):
    done = _run(_machine(tmp_path, uid=0, apt=True, sudo=None))
    assert done.returncode == 0, done.stderr
    assert "apt-get update" in _calls(tmp_path) and "install -y -qq chromium" in _calls(tmp_path)


def test_a_user_installs_it_through_sudo(tmp_path):
    done = _run(_machine(tmp_path, uid=1000, apt=True, sudo=True))
    assert done.returncode == 0, done.stderr
    assert "sudo -n apt-get install -y -qq chromium" in _calls(tmp_path).replace("env DEBIAN_FRONTEND=noninteractive ", "")


@pytest.mark.parametrize(("apt", "sudo", "says"), [
    (True, None, "needs root"),      # not root, no sudo
    (True, False, "needs root"),     # sudo that wants a password
    (False, None, "no apt-get"),     # not a Debian machine
])
def test_it_fails_naming_the_requirement_when_it_cannot_install(tmp_path, apt, sudo, says):
    done = _run(_machine(tmp_path, uid=1000, apt=apt, sudo=sudo))
    assert done.returncode == 1
    assert "Chromium" in done.stderr and says in done.stderr, done.stderr
    assert "install" not in _calls(tmp_path).replace("sudo -n true", "")
