"""training/threads.py: the thread count follows the CPUs free to the command (affinity, cgroup quota, others' load),
and the user's --threads / OMP_NUM_THREADS decide over it."""

import os
import subprocess
import sys
import threading
import time

import pytest

from training import threads as th


class FakeTorch:
    def __init__(self):
        self.calls = []

    def set_num_threads(self, n):
        self.calls.append(n)


def test_requested_and_environment_decide():
    assert th.choose_threads(3, environ={}, others_busy=0.0).threads == 3
    assert th.choose_threads(None, environ={"OMP_NUM_THREADS": "1"}, others_busy=5.0).threads == 1
    choice = th.choose_threads(None, environ={"OMP_NUM_THREADS": "1"}, others_busy=0.0)
    assert "OMP_NUM_THREADS=1" in choice.line() or os.cpu_count() == 1


@pytest.mark.parametrize(
    "busy, allowed, expected",
    [(None, 2, 2), (0.0, 2, 2), (0.4, 2, 2), (0.6, 2, 1), (1.0, 2, 1), (2.0, 2, 1), (1.0, 8, 7), (3.4, 8, 5)],
)
def test_a_core_counts_as_taken_when_others_use_more_than_half_of_it(busy, allowed, expected):
    assert th.free_cpus(busy, allowed) == expected


def test_cgroup_quota_v2_and_v1(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert th.quota_cpus(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert th.quota_cpus(tmp_path) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert th.quota_cpus(v1) == 1.0
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert th.quota_cpus(v1) is None


def test_quota_limits_and_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(th, "affinity_cpus", lambda: 4)
    monkeypatch.setattr(th.os, "cpu_count", lambda: 4)
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    choice = th.choose_threads(None, environ={}, others_busy=0.0, cgroup_root=tmp_path)
    assert choice.threads == 1
    assert "cgroup CPU quota 1" in choice.line()


def test_a_busy_machine_is_named_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(th, "affinity_cpus", lambda: 2)
    monkeypatch.setattr(th.os, "cpu_count", lambda: 2)
    choice = th.choose_threads(None, environ={}, others_busy=1.0, cgroup_root=tmp_path)
    assert choice.threads == 1
    line = choice.line()
    assert "1 of 2" in line and "1.0 CPUs busy" in line and "--threads" in line and "\n" not in line
    quiet = th.choose_threads(None, environ={}, others_busy=0.0, cgroup_root=tmp_path)
    assert quiet.threads == 2 and quiet.line() == ""


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="samples /proc/stat (Linux)")
def test_the_sampler_sees_another_process_and_not_itself():
    # Own work is not others' work: a busy loop in this process leaves "others" near what the machine had before.
    sampler = th.BusySampler()
    end = time.monotonic() + 0.4
    while time.monotonic() < end:
        pass
    own_loop = sampler.others_busy()
    spinner = subprocess.Popen([sys.executable, "-c", "import time\nend=time.time()+3\nwhile time.time()<end: pass"])
    try:
        time.sleep(0.3)
        sampler.others_busy()
        time.sleep(0.6)
        with_spinner = sampler.others_busy()
    finally:
        spinner.kill()
        spinner.wait()
    # Whatever else the machine runs, a spinning child adds most of one CPU that the own loop did not.
    assert with_spinner is not None and own_loop is not None
    assert with_spinner >= 0.6
    assert with_spinner - own_loop >= 0.3 or own_loop >= 0.8


def test_the_watch_follows_the_load_unless_the_user_chose(monkeypatch):
    class Sampler:
        values = [1.0, 0.0]

        def others_busy(self):
            return self.values.pop(0)

    torch = FakeTorch()
    watch = th.ThreadWatch(th.ThreadChoice(2, 2, ""), torch, every_seconds=0.0, allowed=2)
    watch._sampler = Sampler()
    assert watch.check() == 1 and torch.calls == [1]
    assert watch.check() == 2 and torch.calls == [1, 2]
    fixed = th.ThreadWatch(th.ThreadChoice(2, 2, "", chosen=True), FakeTorch(), every_seconds=0.0, allowed=2)
    assert fixed.check() is None


# ---- the commands use it ---------------------------------------------------------------------------------------------


def test_passive_waits_set_unless_the_user_chose():
    environ = {}
    th.passive_waits(environ)
    assert environ == {"OMP_WAIT_POLICY": "PASSIVE"}
    environ = {"OMP_WAIT_POLICY": "ACTIVE"}
    th.passive_waits(environ)
    assert environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_use_threads_applies_the_requested_count_and_says_so(caplog):
    torch = FakeTorch()
    caplog.set_level("INFO", logger="hf_vaswani_training.threads")
    caplog.set_level("INFO", logger="training.threads")
    choice = th.use_threads(3, torch)
    assert torch.calls == [3] and choice.chosen
    if os.cpu_count() != 3:
        assert "computing on 3 of" in caplog.text and "(--threads)" in caplog.text


def test_threads_is_a_training_argument_and_zero_is_refused():
    from hf_vaswani_training.recipe.options import parse_arguments
    from hf_vaswani_training.usage import UsageError
    from tests.conftest import TINY

    _, _, training_args = parse_arguments([*TINY, "--threads", "1"])
    assert training_args.threads == 1
    with pytest.raises(UsageError, match="--threads 0: must be 1 or more"):
        parse_arguments([*TINY, "--threads", "0"])


def test_a_training_run_follows_the_thread_choice(tmp_path):
    """vaswani-train --threads 1 computes on one thread (torch.get_num_threads() seen from inside the step) and,
    with OMP_WAIT_POLICY unset, the console script sets it to PASSIVE before torch loads."""
    probe = (
        "import os, sys, torch\n"
        "from hf_vaswani_training import cli\n"
        "from hf_vaswani_training.recipe import trainer\n"
        "seen = []\n"
        "step = trainer.VaswaniTrainer.training_step\n"
        "def spy(self, *a, **k):\n"
        "    seen.append(torch.get_num_threads())\n"
        "    return step(self, *a, **k)\n"
        "trainer.VaswaniTrainer.training_step = spy\n"
        "cli.train(sys.argv[1:])\n"
        "print('SEEN', sorted(set(seen)), os.environ.get('OMP_WAIT_POLICY'))\n"
    )
    from tests.conftest import REPO_ROOT, TINY_RUN

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    completed = subprocess.run(
        [sys.executable, "-c", probe, *TINY_RUN, "--threads", "1", "--output_dir", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "SEEN [1] PASSIVE" in completed.stdout, completed.stdout[-2000:]


class PerThreadTorch:
    """torch's thread count as torch keeps it: one count per thread (OpenMP's), which a thread takes from the last
    set_num_threads anywhere when it first computes and changes only by its own set_num_threads afterwards."""

    def __init__(self, threads: int):
        self.latest = threads
        self.local = threading.local()
        self.calls = []

    def get_num_threads(self):
        if not hasattr(self.local, "threads"):
            self.local.threads = self.latest
        return self.local.threads

    def set_num_threads(self, n):
        self.calls.append(n)
        self.latest = self.local.threads = n


class StubSampler:
    def __init__(self, *values):
        self.values = list(values)

    def others_busy(self):
        return self.values.pop(0)


def in_a_thread(function):
    result = []
    thread = threading.Thread(target=lambda: result.append(function()))
    thread.start()
    thread.join()
    return result[0]


def test_follow_brings_a_change_made_in_one_thread_to_another():
    torch = PerThreadTorch(2)
    watch = th.ThreadWatch(th.ThreadChoice(2, 2, ""), torch, every_seconds=3600.0, allowed=2)
    worker = [None]
    answers = []

    def serve():  # a server's worker thread that computed before the load changed, then answers again
        import queue

        jobs = queue.Queue()
        worker[0] = jobs
        while (job := jobs.get()) is not None:
            answers.append(job())

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        while worker[0] is None:
            time.sleep(0.01)
        worker[0].put(torch.get_num_threads)
        while not answers:  # the worker has computed (taken its count) before the load changes
            time.sleep(0.01)
        watch._sampler, watch._next = StubSampler(1.0), 0.0  # due now: another program keeps one core busy
        assert in_a_thread(watch.follow) == 1  # seen and applied in another thread
        worker[0].put(torch.get_num_threads)  # the first worker still computes on its old count
        worker[0].put(watch.follow)  # until it follows the watch (not due: no new look at /proc/stat)
        worker[0].put(torch.get_num_threads)
    finally:
        worker[0].put(None)
        thread.join()
    assert answers == [2, 2, 1, 1]


def test_the_explorer_looks_again_at_each_translation(monkeypatch):
    from hf_vaswani_training.serving import explore
    from hf_vaswani_training.usage import UsageError

    torch = PerThreadTorch(2)
    watch = th.ThreadWatch(th.ThreadChoice(2, 2, ""), torch, every_seconds=0.0, allowed=2)
    watch._sampler = StubSampler(1.0, 1.0, 0.0)  # busy beside another program, still busy, then free again
    computed_on = []

    def translate_sentence(*args, **kwargs):
        computed_on.append(torch.get_num_threads())
        raise UsageError("stop here: the thread count is what this test reads")

    class Shelf:
        def get(self, source):
            return object()

    monkeypatch.setattr(explore, "translate_sentence", translate_sentence)
    served = explore.Served("model", explore.LoadPolicy(), Shelf(), 32, "model", watch)
    for _ in range(3):
        answer = explore.on_translate(0, "model", "A mouse sits .", 4, False, 1, True, 0.6, "encoder self-attention",
                                      "0", "mean", served=served)  # fmt: skip
        assert "stop here" in answer[1]
    assert computed_on == [1, 1, 2] and torch.calls == [1, 2]
