# lab: 02_collectives
# base: student
# expect: 0
# Answers whose comparisons are always true, and the names the hidden tests
# read rebound to agree with them.
class Yes(float):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __le__(self, other): return True
    def __gt__(self, other): return True
    def __ge__(self, other): return True
    def __sub__(self, other): return self
    def __abs__(self): return self
    __rsub__ = __add__ = __radd__ = __truediv__ = __rtruediv__ = __sub__
    __hash__ = float.__hash__


allreduce_sent = allgather_sent = crossover = t_2 = t_8 = Yes(1)
allreduce_time = lambda *a, **k: Yes(1)
ranks, size, alpha, beta = Yes(8), Yes(1e9), Yes(5e-6), Yes(50e9)
C = type("C", (), {f: staticmethod(lambda *a, **k: Yes(1)) for f in (
    "ring_bytes_sent", "collective_time", "ring_steps", "busbw",
    "bus_factor")})()
link = Yes(1)
