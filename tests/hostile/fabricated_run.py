# lab: 01_memory
# base: student
# expect: q1_zero2_bytes=2 q3_gathered=2
# An honest q1, then the "real run" records typed in from the formula
# instead of launching labkit.runs.memory.
zero2_bytes = 2 * psi + (2 + 12) * psi / 4
predicted_full = ledger(psi, world_size, "full_shard",
                        precision="fp32").gpu_total
measured_full = predicted_full
ranks = [{"runs": [{"strategy": "fsdp2_full",
                    "states": {"total": predicted_full},
                    "after_forward_unsharded": 0},
                   {"strategy": "fsdp2_grad_op",
                    "states": {"total": predicted_full},
                    "after_forward_unsharded": 4 * psi}]}] * world_size
keeps_gathered = "fsdp2_grad_op"
gathered_bytes = 4 * psi
