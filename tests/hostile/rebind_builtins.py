# lab: 02_collectives
# base: student
# expect: 0
# Plain answers that are wrong, and the built-ins and module functions the
# hidden tests compare with rebound (plain functions, no odd objects), so
# that every `abs(answer - truth) < tol` holds.
allreduce_sent, allgather_sent = 2.0, 1.0
crossover = 1
t_2, t_8 = 0.002, 0.003


def allreduce_time(nbytes):
    return 1.0


def abs(x):
    return 0


def ring_bytes_sent(*a, **k):
    return allreduce_sent


def busbw(*a, **k):
    return 360e9
