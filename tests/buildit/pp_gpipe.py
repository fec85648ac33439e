"""Wrong schedule: GPipe (every forward, then every backward).

Right gradients and, with equal forward and backward slots, the same
bubble; but the first stage holds all m micro-batches of activations."""


def one_f_one_b(stage):
    for i in range(stage.micro_batches):
        stage.forward(i)
    for i in range(stage.micro_batches):
        stage.backward(i)
