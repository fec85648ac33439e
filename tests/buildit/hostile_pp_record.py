"""Hostile: GPipe's order (as pp_gpipe.py), and a rewritten record: each
stage claims 1F1B's table as its events and one micro-batch in flight.

On ranks that report their own schedule this scores "order" and
"in_flight"; the grader's hub reads the order from the messages the
stages sent, which went in GPipe's order."""


def _table(r, p, m):
    warm = min(p - r - 1, m)
    out = [["F", i] for i in range(warm)]
    f, b = warm, 0
    while f < m:
        out += [["F", f], ["B", b]]
        f, b = f + 1, b + 1
    out += [["B", i] for i in range(b, m)]
    return out


def one_f_one_b(stage):
    for i in range(stage.micro_batches):
        stage.forward(i)
    for i in range(stage.micro_batches):
        stage.backward(i)
    table = _table(stage.rank, stage.stages, stage.micro_batches)
    starts = [e[2] for e in stage.events]
    stage.events[:] = [[k, i, s] for (k, i), s in zip(table, starts)]
    stage.peak_in_flight = 1
