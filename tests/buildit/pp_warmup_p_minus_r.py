"""Wrong schedule: p - r warm-up forwards instead of p - r - 1.

Right gradients, but one micro-batch more in flight on every stage than
1F1B allows, and the order is not the textbook's."""


def one_f_one_b(stage):
    p, m, r = stage.stages, stage.micro_batches, stage.rank
    warm = min(p - r, m)
    for i in range(warm):
        stage.forward(i)
    for i in range(m - warm):
        stage.forward(warm + i)
        stage.backward(i)
    for i in range(m - warm, m):
        stage.backward(i)
