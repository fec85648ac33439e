"""Pure formulas: every module here imports no torch and runs anywhere."""
