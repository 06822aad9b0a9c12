"""The usage interface's pure helpers: gaps, counter resets, binning, shapes."""

from __future__ import annotations

import numpy as np
import pytest

from shipshape.analyzers.efficiency.usage import (
    ContainerKey,
    Series,
    UsageData,
    UsageError,
    Window,
    bin_max,
    bin_mean,
    by_pod,
    counter_rate,
    coverage,
    reset_corrected,
)

W = Window(start=100.0, step=10.0, steps=5)  # steps at 100, 110, ..., 140


def test_window_times_and_covering() -> None:
    assert list(W.times()) == [100, 110, 120, 130, 140]
    assert Window.covering(100, 145, 10) == W
    with pytest.raises(UsageError):
        Window(0, 0, 3)
    with pytest.raises(UsageError):
        Window.covering(10, 0, 1)


def test_a_counter_reset_counts_as_a_restart_from_zero() -> None:
    assert list(reset_corrected(np.array([1.0, 3.0, 1.0, 2.0, 0.5]))) == [1, 3, 4, 5, 5.5]


def test_counter_rate_over_a_reset_equals_the_unbroken_rate() -> None:
    times = np.arange(80.0, 141.0, 5.0)  # every 5 s
    counter = 2.0 * (times - 80.0)  # 2 cores
    counter[times >= 115] -= counter[times == 115][0]  # restarted at 115: 0 there, 2/s after
    counter[times == 115] = 0.0
    rate = counter_rate(W, times, counter, range_seconds=20)
    # the interval that ends at the reset loses its increase (Prometheus: the value before a reset
    # is added, the reset sample itself is 0)
    assert rate[0] == pytest.approx(2.0) and rate[1] == pytest.approx(2.0)
    assert rate[2] == pytest.approx(1.5) and rate[3] == pytest.approx(1.5) and rate[4] == pytest.approx(2.0)


def test_counter_rate_is_a_gap_where_the_range_holds_fewer_than_two_samples() -> None:
    times = np.array([100.0, 105.0, 131.0, 140.0])
    rate = counter_rate(W, times, np.array([0.0, 5.0, 6.0, 15.0]), range_seconds=10)
    assert rate[0] != rate[0]  # one sample in [90, 100]: NaN
    assert rate[1] == pytest.approx(1.0)  # 100..105
    assert np.isnan(rate[2]) and np.isnan(rate[3])  # nothing in [110, 120] nor two in [120, 130]
    assert rate[4] == pytest.approx(1.0)  # 131..140


def test_bins_take_the_interval_ending_at_each_step() -> None:
    times = [91.0, 100.0, 101.0, 109.0, 125.0, 150.0]
    values = [1.0, 5.0, 2.0, 4.0, 7.0, 9.0]
    assert np.allclose(bin_max(W, times, values), [5, 4, np.nan, 7, np.nan], equal_nan=True)
    assert np.allclose(bin_mean(W, times, values), [3, 3, np.nan, 7, np.nan], equal_nan=True)
    with pytest.raises(UsageError, match="increasing"):
        bin_max(W, [2.0, 1.0], [1.0, 1.0])


def test_usage_data_checks_shapes_and_reports_coverage() -> None:
    key = ContainerKey("ns", "p", "c")
    rows = np.array([[1, np.nan, 1, 1, np.nan]], dtype=np.float32)
    series = Series((key,), rows, rows.copy())
    data = UsageData(W, series, Series.empty(5), "test")
    assert data.containers.index(key) == 0
    assert coverage(rows)[0] == pytest.approx(0.6)
    with pytest.raises(UsageError, match="steps"):
        UsageData(Window(0, 1, 4), series, Series.empty(4), "test")
    with pytest.raises(UsageError, match="twice"):
        Series((key, key), np.zeros((2, 5), np.float32), np.zeros((2, 5), np.float32))


def test_pod_rows_sum_their_containers_and_keep_gaps() -> None:
    nan = np.nan
    keys = (ContainerKey("ns", "p", "a"), ContainerKey("ns", "p", "b"), ContainerKey("ns", "q", "a"))
    cpu = np.array([[1, nan, nan], [2, 3, nan], [5, 5, 5]], dtype=np.float32)
    pods = by_pod(Series(keys, cpu, cpu.copy()))
    assert pods.keys == (("", "ns", "p"), ("", "ns", "q"))
    np.testing.assert_array_equal(pods.cpu, [[3, 3, nan], [5, 5, 5]])
