"""Where a run's numbers go: one JSON line per step in `metrics.jsonl`, and a progress bar.

The progress bar shows step, reward, loss, KL, tokens/s and sync seconds; the metrics file gets
every metric of every step and a final `{"summary": ...}` line.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from tqdm import tqdm


class JsonlMetricsSink:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("w", encoding="utf-8")

    def record(self, step: int, metrics: Mapping[str, float]) -> None:
        row = {"step": step, "time": time.time(), **{k: float(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def summary(self, summary: Mapping[str, object]) -> None:
        self._file.write(json.dumps({"summary": dict(summary)}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TqdmProgress:
    def __init__(self, total_steps: int) -> None:
        self._bar = tqdm(total=total_steps, desc="grpo", unit="step", file=sys.stderr, dynamic_ncols=True)

    def update(self, step: int, metrics: Mapping[str, float]) -> None:
        self._bar.set_postfix_str(
            f"reward={metrics.get('reward_mean', 0):.3f} loss={metrics.get('loss', 0):.4f} "
            f"kl={metrics.get('kl', 0):.4f} tok/s={metrics.get('tokens_per_second', 0):.0f} "
            f"sync={metrics.get('sync_seconds', 0):.2f}s",
            refresh=False,
        )
        self._bar.update(1)

    def note(self, text: str) -> None:
        self._bar.write(text)

    def close(self) -> None:
        self._bar.close()
