"""`data.eval_split` in the sweep file: `val` (the default) and `test` accepted for the built-in corpus; a bad value,
`test` on a source with one held-out set, or a built-in `val_fraction` that leaves no room for a test side are
refused naming the key (exit 2, nothing written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.cli import main
from sweeper.core.errors import UserError
from sweeper.spec.schema import validate_data


def sweep(**data: object) -> dict:
    return {"name": "split", "methods": ["pre"], "model": {"width": 32, "heads": 2, "depths": [2], "seq_len": 32},
            "train": {"steps": 2, "batch_size": 2}, "data": {"source": "builtin", **data}}


def test_val_and_test_are_accepted_val_by_default() -> None:
    assert validate_data(sweep()).data.eval_split == "val"
    assert validate_data(sweep(eval_split="test")).data.eval_split == "test"


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"eval_split": "train"}, "data.eval_split: expected one of 'val' or 'test' (got 'train')"),
        ({"source": "synthetic", "eval_split": "test"}, "data.eval_split: 'test' is offered by the built-in corpus only"),
        ({"val_fraction": 0.5}, "data.val_fraction: 0.5: the built-in corpus holds this share of its units out twice"),
    ],
)
def test_bad_values_are_refused_naming_the_key(data: dict, needle: str) -> None:
    with pytest.raises(UserError) as err:
        validate_data(sweep(**data))
    assert needle in "\n".join(err.value.lines()), err.value.lines()


def test_launch_refuses_a_bad_eval_split_with_exit_2_and_writes_nothing(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(f"""name: s
output: {tmp_path / 'out'}
methods: [pre]
model: {{width: 32, heads: 2, depths: [2], seq_len: 32}}
train: {{steps: 2, batch_size: 2}}
data: {{source: builtin, eval_split: tset}}
""")
    assert main(["launch", str(path)]) == 2
    err = capsys.readouterr().err
    assert "data.eval_split" in err and "'val' or 'test'" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
