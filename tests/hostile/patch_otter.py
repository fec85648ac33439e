# lab: 02_collectives
# base: student
# expect: 0
# Make otter (and anything called "check") report full marks.
import otter
import otter.test_files
for mod in (otter.test_files,):
    for name in dir(mod):
        obj = getattr(mod, name)
        if isinstance(obj, type):
            for attr in ("passed_all", "all_or_nothing"):
                setattr(obj, attr, property(lambda self: True))
            obj.score = property(lambda self: 1e9)
            obj.grade = property(lambda self: 1.0)
grader.check = lambda *a, **k: "All test cases passed!"
