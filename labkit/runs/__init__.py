"""Entry modules run under torchrun (``torchrun -m labkit.runs.NAME``)."""
