"""The networks of the study.

A LLaMA-style decoder (`models.llama`), one small module per normalization scheme
(`models.schemes.*`, chosen by name through `models.registry`), LayerRoPE
(`models.layerrope`), the looped latent LM and the ViT. Every network carries a
leading *stack* dimension K: K models of identical architecture trained side by side
(one per learning rate of a sweep cell). K = 1 is a plain model.
"""
