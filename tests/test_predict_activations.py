"""The activation ledger's arithmetic and Korthikanti et al. 2022, Table 2."""
import pytest

from labkit.predict import activations as A
from labkit.predict.memory import activation_bytes_per_layer


def test_fp32_block_is_64sbh_plus_statistics():
    s, b, h, a = 32, 4, 64, 4
    blk = A.block_saved(b, s, h, a)
    assert A.total(blk) == 64 * s * b * h + 4 * 4 * s * b + 4 * a * s * b


def test_full_recompute_keeps_the_input_only():
    s, b, h, a = 128, 2, 256, 8
    assert A.total(A.block_saved(b, s, h, a, precision="fsdp_bf16",
                                 recompute="full")) == 2 * s * b * h
    assert A.total(A.block_saved(b, s, h, a, recompute="full")) \
        == 4 * s * b * h


def test_korthikanti_terms_sum_to_table_2():
    s, b, h, a = 2048, 1, 4096, 32
    rows = A.korthikanti_terms(s, b, h, a)
    assert sum(r["paper"] for r in rows) == activation_bytes_per_layer(
        s, b, h, a)
    ours = A.total(A.block_saved(b, s, h, a, precision="fsdp_bf16",
                                 device="cuda"))
    assert sum(r["ours"] for r in rows) == ours
    # the 16-bit linear/LayerNorm inputs are the paper's 34 sbh minus
    # its two dropout masks
    same = [r for r in rows if r["paper"] and r["ours"]]
    assert sum(r["ours"] for r in same) == 32 * s * b * h


def test_autocast_keeps_weight_copies_that_do_not_grow_with_batch():
    one = A.saved(2, 64, 4, 256, 32, 1, precision="autocast_bf16")
    two = A.saved(2, 64, 4, 256, 32, 2, precision="autocast_bf16")
    assert A.total(one, "weight_cast") == A.total(two, "weight_cast") > 0


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="precision"):
        A.saved(2, 64, 4, 256, 32, 1, precision="fp8")
    with pytest.raises(ValueError, match="recompute"):
        A.block_saved(1, 8, 64, 4, recompute="some")
    with pytest.raises(ValueError, match="batch"):
        A.saved(2, 64, 4, 256, 32, 0)


# The positional GPT ledger before it became the record's (labkit 2026-12,
# commit 9ce7f6e): bytes and weight casts of the tiny GPT (2 x 64, 4 heads,
# vocabulary 256, sequence 32, batch 4) for every precision and recompute.
OLD_TINY = {
    ("fp32", "none"): (1255684, 0), ("fp32", "full"): (264452, 0),
    ("fp32", "selective"): (923908, 0),
    ("autocast_bf16", "none"): (1009924, 229376),
    ("autocast_bf16", "full"): (280836, 32768),
    ("autocast_bf16", "selective"): (612612, 32768),
    ("fsdp_bf16", "none"): (696068, 0), ("fsdp_bf16", "full"): (198404, 0),
    ("fsdp_bf16", "selective"): (530180, 0),
}


def test_gpt_preset_through_the_record_equals_the_positional_ledger():
    from labkit.predict.activations import arch as AA
    from labkit.predict.model import arch
    g = arch.preset("gpt-tiny")
    for (prec, rc), (nbytes, casts) in OLD_TINY.items():
        rec = AA.saved(g, 32, 4, prec, rc)
        assert rec == A.saved(2, 64, 4, 256, 32, 4, 4, prec, rc)
        assert (A.total(rec), A.total(rec, "weight_cast")) == (nbytes,
                                                                casts)
        for dev in A.DEVICES:
            assert AA.block_saved(g, 4, 32, prec, rc, device=dev) == \
                A.block_saved(4, 32, 64, 4, 4, prec, rc, dev)
    big = arch.gpt(80, 8192, 64, 32000, 4096)
    assert AA.saved(big, 4096, 1, "fsdp_bf16", "none", device="cuda") == \
        A.saved(80, 8192, 64, 32000, 4096, 1, 4, "fsdp_bf16", "none",
                "cuda")
