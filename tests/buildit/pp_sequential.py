"""Wrong schedule: one micro-batch at a time (forward, then its backward).

Right gradients and the least memory, but no two stages ever work at the
same time: the bubble is (p-1)/p, not (p-1)/(m+p-1)."""


def one_f_one_b(stage):
    for i in range(stage.micro_batches):
        stage.forward(i)
        stage.backward(i)
