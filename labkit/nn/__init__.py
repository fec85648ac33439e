"""The model the labs train: the tiny GPT (``model``), the decoder any
architecture record builds (``decoder``), its MLP (``mlp``) and the mixture
of experts layer (``moe``). torch modules; imports ``labkit.predict`` (the
architecture record) and ``labkit.dist``, never ``labkit.runs`` or the
launcher.
"""
