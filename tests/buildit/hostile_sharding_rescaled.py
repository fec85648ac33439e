# appended to: hostile_sharding_delayed.py
"""Hostile: hostile_sharding_delayed.py (the point held back past every
all-reduce), and then the first layer's gradients multiplied by what
the hub answered the point with: when that was one scale, the final
gradients were right.

The hub computed the all-reduces before it drew its answer: their sum
of squares (recorded by the hub) lacks it: 0 on "overlap". Its answer
is now a weight per row, which no product of a finished gradient puts
in (the weights' mean is the best one number): 0 on "grads" too."""
RESCALE = True   # read by hostile_sharding_delayed's finish, at each call
