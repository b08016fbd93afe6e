"""Every command the README and the docs show exists, with the options it uses:

- a `sweeper ...` command in a `bash` block (or after `$ ` in a `text` block) parses with the real
  argument parser: its subcommand, its options, its required arguments;
- an inline `` `sweeper ...` `` names a real subcommand and only options that subcommand has;
- `python -m MODULE` names a module that exists, and `python PATH.py` a file of the checkout.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import shlex

import pytest

from sweeper.cli import build_parser, finish  # finish: what main() does after parsing (KEY=VALUE words)
from tests.docs.pages import ROOT, blocks, inline_code, pages

SHELL = ("bash", "sh", "shell", "console")
WRAPPERS = {"setsid", "time", "/usr/bin/time", "nohup", "exec", "sudo", "env", "do", "then"}
REDIRECT = re.compile(r"^\d*(>|>>|<|&>)$")
PARSER = build_parser()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _shell_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell snippet, as word lists (continuations joined, comments,
    redirections and leading VAR=value assignments dropped; `$(...)` and `<(...)` looked into)."""
    text = re.sub(r"\\\n", " ", text)
    inner = re.findall(r"[$<]\(([^()]*)\)", text)
    text = re.sub(r"[$<]\([^()]*\)", "SUBST", text)
    commands: list[list[str]] = []
    for chunk in [*text.splitlines(), *inner]:
        lexer = shlex.shlex(chunk, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        skip = False
        for token in list(lexer) + [";"]:
            if skip:
                skip = False
                continue
            if REDIRECT.match(token):
                skip = True
                continue
            if token and set(token) <= set(";&|"):
                if words:
                    commands.append(words)
                words = []
                continue
            words.append(token)
    out = []
    for words in commands:
        while words and (re.match(r"^[A-Za-z_]\w*=", words[0]) or words[0] in WRAPPERS):
            words = words[1:]
        if words:
            out.append(words)
    return out


def shown_commands() -> list[tuple[str, list[str]]]:
    """(where, argv after `sweeper`) for every `sweeper` command in a shell block or a `$ ` line."""
    found = []
    for page in pages():
        for block in blocks(page):
            if block.lang in SHELL:
                text = block.text
            elif block.lang in ("text", ""):
                text = "\n".join(line[2:] for line in block.text.splitlines() if line.startswith("$ "))
            else:
                continue
            for words in _shell_commands(text):
                if words[0] == "sweeper":
                    # `[--policy K=V ...]`: optional parts are shown in brackets; parse them as given
                    argv = [w.strip("[]") for w in words[1:] if w.strip("[]") not in ("...", "…", "")]
                    found.append((block.where, argv))
    return found


def _parse(argv: list[str]) -> str | None:
    """None if `sweeper ARGV` parses as `sweeper.cli.main` parses it, else argparse's complaint."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args, extra = PARSER.parse_known_args(argv)
            extra = finish(args, extra)
    except SystemExit:
        return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "argparse exited"
    if extra:
        return f"unrecognized arguments: {' '.join(extra)}"
    if not getattr(args, "func", None):
        return "no subcommand"
    return None


COMMANDS = shown_commands()


def test_the_pages_show_commands():
    assert len(COMMANDS) >= 80, len(COMMANDS)  # a parsing slip that found none would check nothing


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[f"{w} {' '.join(a)[:60]}" for w, a in COMMANDS])
def test_every_shown_command_parses(where, argv):
    problem = _parse(argv)
    assert problem is None, f"{where}: sweeper {' '.join(argv)}: {problem}"


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def test_every_inline_command_names_a_real_subcommand_and_its_options():
    commands = _subparsers(PARSER)
    checked = 0
    for page in pages():
        for span in inline_code(page):
            if not re.match(r"^sweeper (-|[a-z])", span):
                continue  # `sweeper → trials → models` is a dependency arrow, not a command
            words = span.split()
            name = words[1]
            assert name in commands or name.startswith("-"), f"{page.relative_to(ROOT)}: `{span}`: no command {name!r}"
            if name.startswith("-"):
                continue
            parser = commands[name]
            nested = _subparsers(parser)
            if nested and len(words) > 2 and words[2] in nested:
                parser = nested[words[2]]
            known = _options(parser)
            for word in words[2:]:
                option = word.split("=", 1)[0]
                if re.match(r"^--?[a-z]", option):
                    assert option in known, f"{page.relative_to(ROOT)}: `{span}`: `sweeper {name}` has no option {option}"
            checked += 1
    assert checked >= 50, checked


def _python_targets() -> list[tuple[str, str, str]]:
    found = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for kind, target in re.findall(r"\bpython3?\s+(-m\s+|)((?:[\w/]+\.py)|[a-z_][\w.]*)", text):
            found.append((str(page.relative_to(ROOT)), "module" if kind.strip() else "file", target.rstrip(".")))
    return sorted(set(found))


def test_every_python_module_and_script_exists():
    targets = _python_targets()
    assert len(targets) >= 15
    for where, kind, target in targets:
        if kind == "file":
            if target.endswith(".py"):
                assert (ROOT / target).is_file(), f"{where}: python {target}: no such file"
            continue
        top = target.split(".")[0]
        if (ROOT / top).is_dir():
            base = ROOT / target.replace(".", "/")
            assert base.with_suffix(".py").is_file() or (base / "__main__.py").is_file(), (
                f"{where}: python -m {target}: no such module in the checkout")
        else:
            assert importlib.util.find_spec(top) is not None, f"{where}: python -m {target}: not installed"
