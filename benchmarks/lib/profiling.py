"""`--profile DIR`: torch.profiler tables of one training step, one greedy and one beam-4 batch of each model."""

from __future__ import annotations

import json

import torch

from .decoding import generation_config
from .harness import Stopwatch
from .training_step import training_step


def profile_models(models: dict, train_batch, gen_batch, args, config) -> None:
    """torch.profiler over one training step, one greedy and one beam-4 batch of each model: top ops by self time."""
    from torch.profiler import ProfilerActivity, profile

    args.profile.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.type == "cuda" else [])
    on_device = args.device.type != "cpu"
    sort_by = "self_device_time_total" if on_device else "self_cpu_time_total"

    def self_time(event):  # microseconds
        return event.self_device_time_total if on_device else event.self_cpu_time_total

    summary = {}
    for name, model in models.items():
        is_ours = name == "ours"
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-5, betas=(0.9, 0.98), eps=1e-9)

        def train(model=model, optimizer=optimizer, is_ours=is_ours):
            model.train()
            training_step(model, train_batch, optimizer, args, is_ours)

        def decode(beams, model=model):
            model.eval()
            model.generation_config = generation_config(beams, args, config)
            with torch.no_grad():
                model.generate(**gen_batch)

        tasks = {
            "training_step": train,
            "generate_greedy": lambda decode=decode: decode(1),
            "generate_beam4": lambda decode=decode: decode(4),
        }
        for task, run in tasks.items():
            run()  # warm-up (Adam state, first-call costs)
            with profile(activities=activities) as prof, Stopwatch(args.device) as watch:
                run()
            table = prof.key_averages().table(sort_by=sort_by, row_limit=30)
            (args.profile / f"{name}-{task}.txt").write_text(
                f"{name} {task}: {watch.wall:.3f} s wall, {watch.cpu:.3f} s CPU under the profiler\n{table}\n"
            )
            events = sorted(prof.key_averages(), key=self_time, reverse=True)
            total = sum(self_time(e) for e in events)
            top = [
                {"op": e.key, "self_ms": self_time(e) / 1e3, "share": self_time(e) / total, "calls": e.count}
                for e in events[:15]
            ]
            summary[f"{name}/{task}"] = {"seconds": watch.wall, "cpu_seconds": watch.cpu, "top_ops": top}
            print(f"\n== {name} {task}: {watch.wall:.3f} s wall, {watch.cpu:.3f} s CPU (profiled) ==")
            for e in top[:12]:
                print(f"  {e['op'][:48]:48s} {e['self_ms']:9.1f} ms {100 * e['share']:5.1f}%  {e['calls']:7d} calls")
    (args.profile / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nprofiles written to {args.profile}")
