"""The doctor's what-if models: a DataLoader queue (its steady state is
the throughput bound, its prefetch a buffer) and DDP's gradient buckets."""
import pytest

from labkit.measure.trace import doctor, what_if


def test_the_doctor_re_exports_them():
    assert doctor.data_wait is what_if.data_wait
    assert doctor.ddp_buckets is what_if.ddp_buckets


def test_data_wait_without_workers_is_the_load_time():
    assert what_if.data_wait(30.0, 10.0, 0, steps=3) == [30.0] * 3


def test_data_wait_reaches_the_throughput_bound():
    """w workers deliver w batches per load time: in steady state the
    loop waits load/w - train per step."""
    for w, expect in ((1, 20.0), (2, 5.0), (4, 0.0)):
        waits = what_if.data_wait(30.0, 10.0, w, prefetch_factor=2,
                                  steps=40)
        tail = waits[20:]
        assert sum(tail) / len(tail) == pytest.approx(expect, abs=1e-9)


def test_prefetch_is_a_buffer_not_a_pump():
    slow = [what_if.data_wait(30.0, 10.0, 1, p, steps=30) for p in (1, 2, 8)]
    assert slow[0] == slow[1] == slow[2]      # no head start: same waits
    # with a head start the buffer hides the first steps, then drains
    ahead = what_if.data_wait(30.0, 10.0, 1, prefetch_factor=4, steps=12,
                              head_start_ms=120.0)
    assert ahead[:4] == [0.0] * 4 and ahead[-1] == pytest.approx(20.0)


def test_data_wait_rejects_bad_input():
    with pytest.raises(ValueError):
        what_if.data_wait(30.0, 10.0, -1)
    with pytest.raises(ValueError):
        what_if.data_wait(30.0, 10.0, 2, prefetch_factor=0)


def test_ddp_buckets():
    mib = 1024 * 1024
    params = [4 * mib, 100, 3 * mib, 200]      # bytes, in model order
    # tiny cap: one bucket per tensor, in reverse order
    assert what_if.ddp_buckets(params, 1e-6) == [200, 3 * mib, 100, 4 * mib]
    # default: a 1 MiB first bucket, then 25 MiB ones
    assert what_if.ddp_buckets(params, None) == [200 + 3 * mib,
                                                 100 + 4 * mib]
    assert what_if.ddp_buckets(params, 5.0) == [200 + 3 * mib + 100
                                                + 4 * mib]
    with pytest.raises(ValueError):
        what_if.ddp_buckets(params, 0)
