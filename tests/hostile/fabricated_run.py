# lab: 01_memory
# base: student
# expect: q1_zero2_bytes=2
# An honest q1, then "real run" records typed in instead of launching
# labkit.runs.memory: just the fields an answer is read from, made to agree
# with the formula. The grader launches the run itself and compares; a
# record equal to the real run's in every field would be a correct answer,
# not a forgery.
zero2_bytes = 2 * psi + (2 + 12) * psi / 4
predicted_full = ledger(psi, world_size, "full_shard",
                        precision="fp32").gpu_total
measured_full = predicted_full
ranks = [{"runs": [{"strategy": "fsdp2_full",
                    "states": {"total": predicted_full},
                    "after_forward_unsharded": 0},
                   {"strategy": "fsdp2_grad_op",
                    "states": {"total": predicted_full},
                    "after_forward_unsharded": 3 * psi}]}] * world_size
keeps_gathered = "fsdp2_grad_op"
gathered_bytes = 3 * psi
