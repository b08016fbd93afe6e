"""One module per normalization scheme, each registering itself with `models.registry.register_scheme`.

Adding a scheme: create `models/schemes/<name>.py` with a `Scheme` subclass decorated with
`@register_scheme("<name>")` (see `models.scheme` for the interface), and a test in `tests/models/`.
(The registered name, not the file's, is the scheme's: `layerrope_gains.py` registers `layerrope`,
so that `models/layerrope.py`, the LayerRoPE module the scheme builds on, is the only `layerrope.py`.)
"""
