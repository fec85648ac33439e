"""Entry modules that are not a chapter's: a hanging rank for the
launcher's timeout (``hang``) and a two-rank self test (``selftest``).
Started by ``python -m``; nothing imports them.
"""
