"""Environment columns and the GEMM peak: measured once per process, cheap afterwards."""

import subprocess
from pathlib import Path

import pytest
import torch

import selfattn.measure.device as device_module
from selfattn.measure import device_peak_tflops, environment
from selfattn.measure.device import resolve_device
from selfattn.results import COLUMNS


def test_environment_names_row_columns_and_is_cached(monkeypatch):
    env = environment("cpu")
    assert set(env) <= set(COLUMNS)
    assert env["device"] == "cpu" and "schema_version" not in env  # the row's own (Row's default)
    assert env["num_threads"] == torch.get_num_threads() and env["torch_version"] == torch.__version__
    assert env["cpu_model"] and env["hostname"] and env["timestamp"].endswith("+00:00")
    # No subprocess (git) per row: count them from a cold cache over many rows
    runs = []
    real_run = device_module.subprocess.run
    monkeypatch.setattr(device_module.subprocess, "run", lambda *a, **k: (runs.append(a), real_run(*a, **k))[1])
    device_module._environment.cache_clear()
    device_module.git_sha.cache_clear()
    for _ in range(100):
        assert environment("cpu")["git_sha"] == env["git_sha"]
    assert 1 <= len(runs) <= 2  # git rev-parse and git status, once (one if git is missing)


def test_git_sha_names_the_checkout_commit_and_whether_tracked_files_changed():
    repo = Path(device_module.__file__).resolve().parents[2]

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()

    try:
        head, dirty = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the harness records an empty git_sha there")
    device_module.git_sha.cache_clear()
    assert len(head) == 40 and device_module.git_sha() == head + ("-dirty" if dirty else "")


def test_git_sha_is_empty_without_git(monkeypatch):
    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(device_module.subprocess, "run", no_git)
    device_module.git_sha.cache_clear()
    try:
        assert device_module.git_sha() == ""
    finally:
        device_module.git_sha.cache_clear()  # the next caller sees the real commit again


@pytest.fixture(autouse=True)
def _own_probe_cache(tmp_path, monkeypatch):
    """Each test its own probe cache folder: what it measures or reads is its own."""
    monkeypatch.setenv("SELFATTN_CACHE_DIR", str(tmp_path / "cache"))


def test_cpu_peak_is_plausible_and_measured_once(monkeypatch):
    measured = []
    real_measure = device_module._measure_peak
    monkeypatch.setattr(device_module, "_measure_peak", lambda *a: (measured.append(a), real_measure(*a))[1])
    monkeypatch.setattr(device_module, "_PEAKS", {})
    peak = device_peak_tflops("cpu", torch.float32)
    assert 1e-4 < peak < 100  # 0.1 GFLOP/s .. 100 TFLOP/s
    for _ in range(10):
        assert device_peak_tflops("cpu", torch.float32) == peak
    assert measured == [("cpu", torch.float32)]


def test_resolve_device():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device"):
        resolve_device("tpu")


@pytest.mark.gpu
def test_cuda_environment_and_peak():
    env = environment("cuda")
    assert env["device_name"] and env["device_capability"] and env["device_mem_bytes"] > 0
    assert device_peak_tflops("cuda", torch.float16) > device_peak_tflops("cuda", torch.float64)


@pytest.mark.exclusive  # the time guard's verdict follows the peak measured again here
def test_a_peak_measured_in_a_bad_moment_is_corrected_before_skipping(monkeypatch):
    from selfattn import Point
    from selfattn.measure import Budget, measure_point

    key = ("cpu", torch.float32, False)
    device_peak_tflops("cpu", torch.float32)
    monkeypatch.setattr(device_module, "_REMEASURED", {})
    monkeypatch.setitem(device_module._PEAKS, key, 1e-9)  # as if measured while the CPU was swamped
    row = measure_point(Point(heads=2, seq_len=1024, head_dim=16), Budget(timing_s=0.02, accuracy_rows=16))
    assert row.status == "ok", row.error
    # Once by the time guard, before it decides; the check after the call (_heal_low_probes) measures once more
    # where the call beat that peak, as it can when other processes load the CPU while the guard measures.
    assert row.device_peak_tflops > 1e-6 and device_module._REMEASURED[key] in (1, 2)


def test_cpu_bandwidth_is_plausible_and_measured_once(monkeypatch):
    measured = []
    real_measure = device_module._measure_bandwidth
    monkeypatch.setattr(device_module, "_measure_bandwidth", lambda d: (measured.append(d), real_measure(d))[1])
    monkeypatch.setattr(device_module, "_BANDWIDTH", {})
    monkeypatch.setattr(device_module, "BANDWIDTH_BYTES", {"cpu": 64 * 2**20, "cuda": 2**30})
    peak = device_module.device_peak_gbps("cpu")
    assert 0.1 < peak < 10_000  # 100 MB/s .. 10 TB/s
    assert device_module.device_peak_gbps("cpu") == peak
    assert measured == ["cpu"]


def _fresh_process(monkeypatch):
    """As a new process starts: no peak known in memory (the cache file stays)."""
    for name in ("_PEAKS", "_SOURCES", "_REMEASURED", "_BANDWIDTH"):
        monkeypatch.setattr(device_module, name, {})


def test_probes_are_measured_once_per_machine_and_read_from_the_cache_file(tmp_path, monkeypatch):
    import json

    from selfattn.measure import probes

    measured = []
    real_peak, real_bandwidth = device_module._measure_peak, device_module._measure_bandwidth
    monkeypatch.setattr(device_module, "_measure_peak", lambda *a: (measured.append("tflops"), real_peak(*a))[1])
    monkeypatch.setattr(device_module, "_measure_bandwidth", lambda d: (measured.append("gbps"), real_bandwidth(d))[1])
    monkeypatch.setattr(device_module, "BANDWIDTH_BYTES", {"cpu": 16 * 2**20, "cuda": 2**30})
    _fresh_process(monkeypatch)
    peak, gbps = device_peak_tflops("cpu", torch.float32), device_module.device_peak_gbps("cpu")
    assert measured == ["tflops", "gbps"] and device_module.peak_source("cpu", torch.float32) == probes.MEASURED
    path = probes.cache_file(device_module.machine_key("cpu"))
    assert path.parent == tmp_path / "cache" and path.is_file()
    saved = json.loads(path.read_text())
    assert saved["probes"]["tflops float32 tf32=off"]["value"] == peak and saved["probes"]["gbps"]["value"] == gbps
    assert saved["probes"]["gbps"]["unit"] == "GB/s" and saved["probes"]["gbps"]["measured_at"].startswith("20")
    assert probes.REMEASURE_COMMAND in saved["remeasure"] and saved["machine"]["torch_version"] == torch.__version__

    _fresh_process(monkeypatch)  # the next process reads the file: nothing measured
    assert device_peak_tflops("cpu", torch.float32) == peak and device_module.device_peak_gbps("cpu") == gbps
    assert measured == ["tflops", "gbps"]
    date = saved["probes"]["tflops float32 tf32=off"]["measured_at"]
    assert device_module.peak_source("cpu", torch.float32) == f"cache {path} (measured {date})"
    assert device_module.peak_source("cpu").startswith(f"cache {path}")

    _fresh_process(monkeypatch)  # another dtype is another probe: measured, beside the first in the same file
    device_peak_tflops("cpu", torch.float64)
    assert measured[-1] == "tflops" and len(json.loads(path.read_text())["probes"]) == 3

    _fresh_process(monkeypatch)  # other threads are another machine's numbers: another file
    monkeypatch.setattr(torch, "get_num_threads", lambda: 97)
    assert probes.cache_file(device_module.machine_key("cpu")) != path


def test_a_broken_or_switched_off_cache_measures(tmp_path, monkeypatch):
    from selfattn.measure import probes

    measured = []
    real_peak = device_module._measure_peak
    monkeypatch.setattr(device_module, "_measure_peak", lambda *a: (measured.append(1), real_peak(*a))[1])
    _fresh_process(monkeypatch)
    path = probes.cache_file(device_module.machine_key("cpu"))
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    device_peak_tflops("cpu", torch.float32)
    assert measured == [1] and device_module.peak_source("cpu", torch.float32) == probes.MEASURED
    monkeypatch.setenv("SELFATTN_CACHE_DIR", "none")
    assert probes.cache_dir() is None and probes.cache_file(device_module.machine_key("cpu")) is None
    _fresh_process(monkeypatch)
    device_peak_tflops("cpu", torch.float32)
    assert measured == [1, 1]
    monkeypatch.delenv("SELFATTN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert probes.cache_dir() == tmp_path / "xdg" / "selfattn-bench"


def test_a_row_names_where_its_peaks_came_from(monkeypatch):
    from selfattn import Point
    from selfattn.measure import Budget, measure_point

    _fresh_process(monkeypatch)
    monkeypatch.setattr(device_module, "BANDWIDTH_BYTES", {"cpu": 16 * 2**20, "cuda": 2**30})
    point, budget = Point(heads=2, seq_len=64, head_dim=16), Budget(timing_s=0.02, accuracy_rows=8, max_point_s=600)
    first = measure_point(point, budget)
    assert first.device_peak_tflops_source == "measured" and first.device_peak_gbps_source == "measured"
    _fresh_process(monkeypatch)
    again = measure_point(point, budget)
    assert again.device_peak_tflops == first.device_peak_tflops
    assert again.device_peak_tflops_source.startswith("cache ") and again.device_peak_gbps_source.startswith("cache ")
    nominal = measure_point(point, Budget(timing_s=0.02, accuracy_rows=8, measure_device_peak=False))
    assert nominal.device_peak_tflops_source == "nominal" and nominal.device_peak_tflops is None


def test_the_remeasure_command_measures_again_and_shows_the_cache(monkeypatch, capsys):
    from selfattn.measure import probes, remeasure

    monkeypatch.setattr(device_module, "BANDWIDTH_BYTES", {"cpu": 16 * 2**20, "cuda": 2**30})
    _fresh_process(monkeypatch)
    key = device_module.machine_key("cpu")
    probes.store(key, "tflops float32 tf32=off", 1e-9, "TFLOP/s")  # a value from a swamped moment
    assert remeasure.main(["--device", "cpu", "--remeasure"]) == 0
    out = capsys.readouterr().out
    assert "fp32: matmul peak" in out and "copy bandwidth" in out and str(probes.cache_file(key)) in out
    assert probes.read(key)["probes"]["tflops float32 tf32=off"]["value"] > 1e-6


def test_a_low_cached_probe_is_measured_again_when_a_point_beats_it(monkeypatch):
    """A peak cached while the machine was swamped would stay for every later sweep: a point whose own
    call is faster than the peak (or moves more bytes per second than the bandwidth) measures it again,
    and the better value replaces the cache's."""
    from selfattn import Point
    from selfattn.measure import Budget, measure_point, probes

    _fresh_process(monkeypatch)
    monkeypatch.setattr(device_module, "BANDWIDTH_BYTES", {"cpu": 64 * 2**20, "cuda": 2**30})
    key = device_module.machine_key("cpu")
    probes.store(key, device_module._probe_name(torch.float32, False), 1e-7, "TFLOP/s")  # 100 kFLOP/s: far too low
    probes.store(key, "gbps", 1e-4, "GB/s")
    budget = Budget(timing_s=0.02, accuracy_rows=16)
    row = measure_point(Point(heads=2, seq_len=256, head_dim=32), budget)
    assert row.status == "ok", row.error
    assert row.tflops > 1e-7 and row.device_peak_tflops > 1e-6, (row.tflops, row.device_peak_tflops)
    assert row.device_peak_tflops_source == probes.MEASURED
    assert row.device_peak_gbps > 1e-3 and row.device_peak_gbps_source == probes.MEASURED
    _fresh_process(monkeypatch)  # the next process reads the corrected values
    assert probes.lookup(key, device_module._probe_name(torch.float32, False))[0] == row.device_peak_tflops
    assert probes.lookup(key, "gbps")[0] == row.device_peak_gbps

    # the control: a plausible cached peak (far above what the point reaches) is kept, not measured again
    _fresh_process(monkeypatch)
    probes.store(key, device_module._probe_name(torch.float32, False), 1e3, "TFLOP/s")
    again = measure_point(Point(heads=2, seq_len=256, head_dim=32), budget)
    assert again.device_peak_tflops == 1e3 and again.device_peak_tflops_source.startswith("cache")


def _trials(monkeypatch, values: list[float]) -> list[tuple[int, int]]:
    """_gemm_trial answers `values` in turn (the size grows to 1024 after the first); returns (n, threads) per call."""
    calls: list[tuple[int, int]] = []

    def trial(device, dtype, n, timing_s):
        calls.append((n, torch.get_num_threads()))
        return 1024, values[len(calls) - 1]

    monkeypatch.setattr(device_module, "_gemm_trial", trial)
    return calls


def test_the_peak_is_the_best_of_short_trials_and_a_quiet_machine_stops_at_two(monkeypatch):
    calls = _trials(monkeypatch, [0.30, 0.29])
    assert device_module._measure_peak("cpu", torch.float32) == 0.30 and len(calls) == 2
    # a first trial slowed by another process (its growth stopped at 256) does not set the peak: the next ones do
    calls = _trials(monkeypatch, [0.002, 0.28, 0.30])
    assert device_module._measure_peak("cpu", torch.float32) == 0.30
    assert [n for n, _ in calls] == [256, 1024, 1024]


def test_trials_that_never_agree_add_a_one_thread_trial_as_a_bound_from_below(monkeypatch):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        calls = _trials(monkeypatch, [0.002, 0.01, 0.04, 0.2])  # every thread's barriers collapsing, one thread fine
        assert device_module._measure_peak("cpu", torch.float32) == 0.2
        assert [threads for _, threads in calls] == [2, 2, 2, 1]
    finally:
        torch.set_num_threads(before)


def test_a_loaded_probe_cannot_make_an_honest_kernel_incorrect(monkeypatch):
    """The floor (selfattn/measure/floor.py) with the probe's trials faked: the first measurement was taken under load
    (tiny), the remeasure before judging gets a quiet trial, so the honest time stands; a lookup is still caught."""
    from selfattn.measure import floor
    from selfattn.point import Point
    from selfattn.results import Row

    for table in ("_PEAKS", "_SOURCES", "_REMEASURED"):
        monkeypatch.setattr(device_module, table, {})
    monkeypatch.setattr(device_module, "machine_key", lambda device: {"test": "loaded-probe"})
    monkeypatch.setenv("SELFATTN_CACHE_DIR", "none")
    loaded = iter([0.001, 0.0012, 0.0011, 0.3, 0.3, 0.3, 0.3])  # three loaded trials, then quiet remeasures
    monkeypatch.setattr(device_module, "_gemm_trial", lambda device, dtype, n, timing_s: (1024, next(loaded)))
    monkeypatch.setattr(device_module.torch, "get_num_threads", lambda: 1)  # no one-thread trial: the fake's order
    monkeypatch.setattr(floor, "_one_thread_peak", lambda d, dtype: 0.0)
    point = Point(backend="sdpa", heads=2, seq_len=256, head_dim=64)
    honest_ms = 4 * 2 * 256 * 256 * 64 / 0.1e12 * 1e3  # 0.1 TFLOP/s: honest on a 0.3 TFLOP/s CPU
    assert device_module.device_peak_tflops("cpu", torch.float32) == pytest.approx(0.0012)  # the loaded probe
    assert floor.judge(point, "cpu", torch.float32, honest_ms, Row(), measured_peaks=True) == ""
    assert device_module.device_peak_tflops("cpu", torch.float32) == 0.3  # measured again, the better kept
    assert "below the physical floor" in floor.judge(point, "cpu", torch.float32, honest_ms / 100, Row(),
                                                     measured_peaks=True)
