"""``python -m labkit.predict.activations``: the ledger of the default
GPT, as a table."""
from labkit.predict.activations import saved, table

print(table(saved(layers=2, hidden=64, heads=4, vocab=256, seq=32,
                  batch=4)))
