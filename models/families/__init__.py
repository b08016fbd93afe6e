"""The model families: one module per family, each registering its `models.family.FamilySpec`.

`llama` (the LLaMA-style decoder), `looped` (the Parcae-style looped LM) and `vit` (the Vision
Transformer). A module here holds the family's settings (`model.extra`), its exact parameter and FLOP
counting and its entry; the networks themselves are `models.llama`, `models.looped`, `models.vit`.
Modules are imported by `models.family` on first lookup; none imports torch.
"""
