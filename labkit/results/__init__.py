"""A lab's results on disk: the run folders and their lock (``labruns``,
``runlock``), the results file a lab writes (``resultsfile``), what was run
where (``provenance``) and the faults a lab records (``labfaults``). Imports
``labkit.lab`` and the standard library, never ``labkit.runs``.
"""
