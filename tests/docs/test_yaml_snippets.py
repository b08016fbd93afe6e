"""Every YAML snippet of the README and the docs validates with `sweeper validate`, unless the HTML
comment on the line before its fence says what it is:

- `<!-- snippet: fragment -->`: a part of a sweep file; merged onto `sweeps/quickstart.yaml` (or onto the
  file named by `fragment of PATH`) and the result validated;
- `<!-- snippet: fragment, needs data (why) -->`: the same, and the only problems allowed are about data
  paths that do not exist on this machine;
- `<!-- snippet: invalid (why) -->`: must fail validation (it shows the errors);
- `<!-- snippet: not a sweep (what it is) -->`: not checked; the marker must say what it is.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sweeper.cli import main
from tests.docs.pages import ROOT, Block, blocks, pages

SNIPPETS = [b for page in pages() for b in blocks(page) if b.lang in ("yaml", "yml")]


def _merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        return {**base, **{k: _merge(base.get(k), v) for k, v in patch.items()}}
    return patch


def _validate(text: str, tmp_path: Path, capsys) -> tuple[int, str]:
    path = tmp_path / "sweep.yaml"
    path.write_text(text, encoding="utf-8")
    capsys.readouterr()
    code = main(["validate", str(path)])
    return code, capsys.readouterr().err


def test_the_pages_have_snippets_of_every_kind():
    kinds = {(b.marker or "sweep").split()[0].rstrip(",") for b in SNIPPETS}
    assert {"sweep", "fragment", "invalid", "not"} <= kinds, kinds


@pytest.mark.parametrize("block", SNIPPETS, ids=[b.where for b in SNIPPETS])
def test_every_yaml_snippet_validates(block: Block, tmp_path, capsys):
    marker = block.marker or ""
    if marker.startswith("not a sweep"):
        assert re.match(r"not a sweep \(.+\)", marker), f"{block.where}: say what the snippet is: {marker!r}"
        return
    if marker.startswith("fragment"):
        base_name = re.search(r"fragment of (\S+)", marker)
        base = yaml.safe_load((ROOT / (base_name.group(1) if base_name else "sweeps/quickstart.yaml")).read_text())
        text = yaml.safe_dump(_merge(base, yaml.safe_load(block.text)), sort_keys=False)
    else:
        text = block.text
    code, err = _validate(text, tmp_path, capsys)
    if marker.startswith("invalid"):
        assert code == 2 and "error:" in err, f"{block.where}: marked invalid but `sweeper validate` accepts it"
    elif "needs data" in marker:
        problems = [line for line in err.splitlines() if re.match(r"error: .*:\d+: ", line)]
        assert code == 0 or (problems and all("data.path" in p or "data.val_path" in p for p in problems)), (
            f"{block.where}: {err}")
    else:
        assert marker in ("", "fragment") or marker.startswith("fragment of"), f"{block.where}: unknown marker {marker!r}"
        assert code == 0, f"{block.where}: `sweeper validate` refuses the snippet:\n{err}"
