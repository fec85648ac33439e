# lab: 03_sharding
# base: student
# expect: 0
# issue 30 (8): the right name, and an empty dict that made a check of
# every entry it holds pass vacuously.
three_phi = "full_shard"
phi_units = {}
