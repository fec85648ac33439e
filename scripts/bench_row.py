"""One row of a benchmark table: what, its budget, the measured seconds,
their ratio and a status (OVER past the budget). Shared by
``scripts/benchmark.py`` and ``scripts/bench_grading.py``."""


def row(what: str, budget_s: float, measured_s: float | None,
        status: str = "ok", detail: str = "") -> dict:
    ratio = None if measured_s is None else measured_s / budget_s
    if status == "ok" and ratio is not None and ratio > 1:
        status = "OVER"
    return {"what": what, "budget_s": budget_s,
            "measured_s": None if measured_s is None else round(measured_s, 2),
            "ratio": None if ratio is None else round(ratio, 3),
            "status": status, "detail": detail}
