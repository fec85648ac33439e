# lab: 05_tensor_parallel
# base: student
# expect: 0
# issue 30 (8): no partial outputs at all (a check over each of them
# passed vacuously) and the unsplit reference handed in as their sum.
partials = []
y_tp = reference
