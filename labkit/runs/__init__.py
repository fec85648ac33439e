"""Entry modules run under torchrun (``torchrun -m labkit.runs.NAME``), one
per chapter's lab (``memory``, ``collectives``, ``sharding``, ``zero``,
``tensor_parallel``, ``pipeline_parallel``, ``profiling``, ``checkpoint``,
``colossalai``, ``mesh``, ``context_parallel``, ``fit``, ``experts``,
``precision``, ``compile``, ``hangs``, and ``optimizers``, a package
whose ``__main__`` is the entry); their pieces in ``tp/``,
``cai/``, ``amp/``, ``blocks/``, and the non-chapter entries in
``tools/``. They may import anything below them (``measure``,
``predict``, ``nn``, ``training``, the root modules); nothing in labkit
imports them (``.importlinter``), the launcher starts them by name.
"""
