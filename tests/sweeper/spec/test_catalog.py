"""The torch-free name lists of the schema agree with the real registries."""

from __future__ import annotations

import subprocess
import sys

from sweeper.spec import catalog


def test_scheme_names_match_the_registry():
    from models.registry import scheme_names

    assert set(catalog.scheme_names()) == set(scheme_names())


def test_named_sizes_match_models_named():
    from models.named import named_configs

    sizes = catalog.named_sizes()
    assert set(sizes) == set(named_configs())
    for name, cfg in named_configs().items():
        assert (sizes[name].width, sizes[name].depth, sizes[name].heads) == (cfg.width, cfg.depth, cfg.n_heads)


def test_validation_imports_neither_torch_nor_ray():
    code = (
        "import sys; from sweeper.spec.schema import validate_data; "
        "validate_data({'name': 'x', 'methods': ['pre'], 'model': {'depths': [2]}, 'train': {'steps': 5}}); "
        "print(sorted(m for m in ('torch', 'ray', 'optuna') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
