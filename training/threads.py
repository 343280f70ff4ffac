"""How many CPU threads a command computes with: the CPUs actually free to it, not the CPUs the machine has.

torch runs each operator on `torch.get_num_threads()` OpenMP threads and, by default, takes every core the machine
has. On a machine where another program keeps one of two cores busy, each parallel region then waits at its barrier
for the thread the kernel has descheduled: measured on a 2-core machine beside one busy process, the toy recipe's
steps took 4-5 times as long on 2 threads as on 1 (benchmarks/README.md, "A busy machine"). So the commands count:

- the CPUs this process may run on (its affinity mask: `taskset`, a container's cpuset);
- the CPU time its cgroup may use (a container's or a systemd unit's quota: `docker --cpus 1.5` gives 1);
- the CPUs other processes keep busy, sampled from /proc/stat over a quarter of a second (a core counts as taken
  when others use more than half of it);

and use what is left (at least 1). `--threads N` on the command line, or OMP_NUM_THREADS in the environment, decides
instead. `ThreadWatch` looks again while a run goes on (and as the explorer answers), so a run or a server that
started beside a busy program takes the core back when that program ends.

The cause of the slowdown is the waiting, not the count alone: torch's OpenMP (GNU libgomp) lets a thread that reaches
a barrier first spin on its core before it sleeps. When the other thread is descheduled, the spinning one burns the
time slice the other needs (measured beside one busy core, toy model steps: 13.1 s a step and 3.9 CPU-seconds on 2
threads, 1.2 s and 0.41 CPU-seconds on 2 threads with OMP_WAIT_POLICY=PASSIVE, 1.5 s on 1 thread).
`passive_waits` sets OMP_WAIT_POLICY=PASSIVE before torch loads unless the user set it, so that a count the watch has
not yet corrected costs little.

Standard library only (torch is handed in where the count is applied), so that the count is made before torch loads.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

THREADS_ENV = "OMP_NUM_THREADS"
WAIT_POLICY_ENV = "OMP_WAIT_POLICY"
# Others' use of a CPU above which it counts as taken: a core half used by someone else is a core our barrier waits on.
TAKEN_ABOVE = 0.5
SAMPLE_SECONDS = 0.25


def passive_waits(environ: dict | None = None) -> None:
    """OMP_WAIT_POLICY=PASSIVE unless already set: OpenMP threads sleep at a barrier instead of spinning on a core
    another thread (or program) needs. Read once, when OpenMP starts: call it before torch is imported."""
    environ = os.environ if environ is None else environ
    environ.setdefault(WAIT_POLICY_ENV, "PASSIVE")


def use_threads(requested: int | None, torch_module) -> ThreadChoice:
    """choose_threads + apply_threads: the count a command computes with, said in one line when it is fewer than the
    machine has."""
    choice = choose_threads(requested)
    apply_threads(choice, torch_module)
    return choice


def affinity_cpus() -> int:
    """CPUs this process may run on (the affinity mask), or os.cpu_count() where the platform has no mask."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def quota_cpus(cgroup_root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (v2 `cpu.max`, v1 `cpu.cfs_quota_us`), None where unlimited."""
    candidates = [(cgroup_root / "cpu.max", None), (cgroup_root / "cpu" / "cpu.cfs_quota_us", "cpu.cfs_period_us")]
    for path, period_name in candidates:
        try:
            text = path.read_text().split()
            if period_name is None:  # v2: "max 100000" or "150000 100000"
                quota, period = text[0], text[1]
            else:
                quota, period = text[0], (path.parent / period_name).read_text().split()[0]
        except (OSError, IndexError):
            continue
        if quota in ("max", "-1"):
            return None
        try:
            return int(quota) / int(period)
        except (ValueError, ZeroDivisionError):
            return None
    return None


def _cpu_times(cpus: set[int] | None) -> tuple[float, float]:
    """(busy, total) jiffies of the CPUs named (all where None), from /proc/stat."""
    busy = total = 0.0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        if cpus is not None and int(name[3:]) not in cpus:
            continue
        values = [float(v) for v in fields[:8]]
        idle = values[3] + values[4]  # idle + iowait
        total += sum(values)
        busy += sum(values) - idle
    return busy, total


def _own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


class BusySampler:
    """CPUs kept busy by OTHER processes since the last call (this process's own CPU time is taken out)."""

    def __init__(self, cpus: set[int] | None = None):
        self.cpus = cpus
        self._last = self._read()

    def _read(self) -> tuple[float, float, float, float]:
        busy, total = _cpu_times(self.cpus)
        return busy, total, _own_cpu_seconds(), time.monotonic()

    def others_busy(self) -> float | None:
        """Others' CPU use in CPUs (1.0 = one core fully used) over the time since the last call; None if unknown."""
        before, now = self._last, self._read()
        self._last = now
        busy, total = now[0] - before[0], now[1] - before[1]
        wall = now[3] - before[3]
        if total <= 0 or wall <= 0:
            return None
        cpus = len(self.cpus) if self.cpus else (os.cpu_count() or 1)
        used = busy / total * cpus  # CPUs in use by everyone, this process included
        own = (now[2] - before[2]) / wall
        return max(0.0, used - own)


def others_busy_now(seconds: float = SAMPLE_SECONDS) -> float | None:
    """Others' CPU use in CPUs, sampled over `seconds`; None where /proc/stat cannot be read (not Linux)."""
    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        cpus = None
    try:
        sampler = BusySampler(cpus)
    except (OSError, ValueError):
        return None
    time.sleep(seconds)
    try:
        return sampler.others_busy()
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    machine: int  # CPUs the machine has (os.cpu_count())
    reason: str  # why fewer than the machine has, or who chose; "" when all
    chosen: bool = False  # by the user (--threads or OMP_NUM_THREADS): the watch leaves it alone

    def line(self) -> str:
        """One line for the log, or "" when the command uses every CPU the machine has and nobody chose."""
        if not self.reason:
            return ""
        return f"computing on {self.threads} of {self.machine} CPU threads ({self.reason})"


def free_cpus(others_busy: float | None, allowed: float) -> int:
    """CPUs left when others use `others_busy` of `allowed`: a CPU counts as taken when more than half of it is."""
    taken = 0 if others_busy is None else math.floor(others_busy + (1 - TAKEN_ABOVE))
    return max(1, int(allowed) - taken)


def choose_threads(
    requested: int | None = None,
    *,
    environ: dict | None = None,
    others_busy: float | None | str = "sample",
    cgroup_root: Path = Path("/sys/fs/cgroup"),
) -> ThreadChoice:
    """The thread count for a command: `requested` (the command's --threads) or OMP_NUM_THREADS when given, else the
    CPUs free to this process (affinity, cgroup quota, minus the CPUs others keep busy)."""
    environ = os.environ if environ is None else environ
    machine = os.cpu_count() or 1
    if requested is not None:
        return ThreadChoice(requested, machine, "--threads" if requested != machine else "", chosen=True)
    from_env = environ.get(THREADS_ENV, "").strip()
    if from_env.isdigit() and int(from_env) > 0:
        threads = int(from_env)
        return ThreadChoice(threads, machine, f"{THREADS_ENV}={threads}" if threads != machine else "", chosen=True)
    affinity = affinity_cpus()
    quota = quota_cpus(cgroup_root)
    allowed = min(affinity, max(1, math.floor(quota))) if quota is not None else affinity
    busy = others_busy_now() if others_busy == "sample" else others_busy
    threads = free_cpus(busy, allowed)
    reasons = []
    if affinity < machine:
        reasons.append(f"{affinity} in this process's CPU affinity")
    if quota is not None and quota < affinity:
        reasons.append(f"cgroup CPU quota {quota:g}")
    if threads < allowed:
        reasons.append(f"other processes keep {busy:.1f} CPUs busy; --threads N or {THREADS_ENV} to choose")
    return ThreadChoice(threads, machine, "; ".join(reasons) if threads < machine else "")


def apply_threads(choice: ThreadChoice, torch_module) -> None:
    """Set torch's intra-op threads to the choice and say so in one line when it is fewer than the machine has."""
    torch_module.set_num_threads(choice.threads)
    if choice.line():
        logger.info(choice.line())


class ThreadWatch:
    """Looks again every `every_seconds` while a run goes on: when others start or stop keeping CPUs busy, the
    thread count follows (only when nobody chose it with --threads or OMP_NUM_THREADS). Call `check()` from the
    training loop (a TrainerCallback does), or `follow()` from each request of a server (the explorer does); either
    costs one read of /proc/stat when due, and nothing but a clock read otherwise."""

    def __init__(self, choice: ThreadChoice, torch_module, *, every_seconds: float = 20.0, allowed: int | None = None):
        self.torch = torch_module
        self.every_seconds = every_seconds
        self.threads = choice.threads
        self.fixed = choice.chosen
        self.allowed = allowed if allowed is not None else self._allowed()
        self._next = time.monotonic() + every_seconds
        self._looking = threading.Lock()  # one look at a time: two threads sampling at once would halve the interval
        try:
            self._sampler = BusySampler(os.sched_getaffinity(0)) if not self.fixed else None
        except (AttributeError, OSError, ValueError):
            self._sampler = None

    @staticmethod
    def _allowed() -> int:
        quota = quota_cpus()
        affinity = affinity_cpus()
        return min(affinity, max(1, math.floor(quota))) if quota is not None else affinity

    def check(self) -> int | None:
        """The new thread count when it changed, else None."""
        if self._sampler is None or time.monotonic() < self._next:
            return None
        if not self._looking.acquire(blocking=False):
            return None  # another thread is looking now
        try:
            if time.monotonic() < self._next:
                return None
            self._next = time.monotonic() + self.every_seconds
            busy = self._sampler.others_busy()
        except (OSError, ValueError):
            return None
        finally:
            self._looking.release()
        threads = free_cpus(busy, self.allowed)
        if threads == self.threads:
            return None
        self.threads = threads
        self.torch.set_num_threads(threads)
        logger.info(
            "now computing on %d of %d CPU threads (other processes keep %.1f CPUs busy)",
            threads,
            os.cpu_count() or 1,
            busy or 0.0,
        )
        return threads

    def follow(self) -> int:
        """`check()`, then the calling thread computes on the watch's count, which it returns. torch keeps the count
        per thread (OpenMP's, applied when a thread first computes): a server that answers on a pool of threads calls
        this in the thread about to compute, so a change made in one thread reaches the others too."""
        self.check()
        if self.torch.get_num_threads() != self.threads:
            self.torch.set_num_threads(self.threads)
        return self.threads
