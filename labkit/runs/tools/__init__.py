"""Entry modules that are not a chapter's: a hanging rank for the
launcher's timeout (``hang``), a two-rank self test (``selftest``), the
rank side of a build-it part (``buildit``, whose ``describe`` the build-it
harness reads too) and the second run of chapter 8's checkpoint lab, the
load on another world size (``reshard``). Started by ``python -m``.
"""
