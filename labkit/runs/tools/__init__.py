"""Entry modules that are not a chapter's: a hanging rank for the
launcher's timeout (``hang``), a two-rank self test (``selftest``) and the
rank side of a build-it part (``buildit``, whose ``describe`` the build-it
harness reads too). Started by ``python -m``.
"""
