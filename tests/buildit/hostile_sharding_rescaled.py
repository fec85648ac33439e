# appended to: hostile_sharding_delayed.py
"""Hostile: hostile_sharding_delayed.py (the point held back past every
all-reduce), and then the first layer's gradients multiplied by the
scale the hub answered the point with, so that the final gradients are
right.

The hub computed the all-reduces before it drew the scale: their sum of
squares (recorded by the hub) lacks it: 0 on "overlap"; "grads" passes
(they are right)."""
RESCALE = True   # read by hostile_sharding_delayed's finish, at each call
