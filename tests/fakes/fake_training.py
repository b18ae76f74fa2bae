"""Working in-memory fakes of the env-GRPO loop's ports: rollout pool, learner, publisher, sinks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from application.ports.environment import Problem
from application.ports.training import RolloutRequest
from application.ports.weight_publisher import PublishReport
from domain.episodes import Episode, Segment

ScoreRule = Callable[[Problem, int, int], float]  # (problem, generation index, weight version) -> score


class FakeTicket:
    def __init__(self, groups: list[list[Episode]]) -> None:
        self._groups = groups

    def result(self, timeout: float) -> list[list[Episode]]:
        return self._groups


class FakeRolloutPool:
    """Makes episodes at once; the score comes from a rule of the problem, index and version."""

    def __init__(self, score: ScoreRule) -> None:
        self._score = score
        self.requests: list[RolloutRequest] = []
        self.closed = False

    def submit(self, request: RolloutRequest) -> FakeTicket:
        self.requests.append(request)
        groups = [
            [
                Episode(
                    prompt_token_ids=[1, 2, 3],
                    segments=[Segment.from_engine([4, 5], [-0.5, -0.25])],
                    scores={"environment": self._score(problem, g, request.weight_version)},
                    weight_version=request.weight_version,
                )
                for g in range(request.num_generations)
            ]
            for problem in request.problems
        ]
        return FakeTicket(groups)

    def close(self) -> None:
        self.closed = True


class FakeLearner:
    def __init__(self) -> None:
        self.batches: list[tuple[list[Episode], list[float]]] = []

    def train_step(self, episodes: Sequence[Episode], advantages: Sequence[float]) -> Mapping[str, float]:
        self.batches.append((list(episodes), list(advantages)))
        return {"loss": 0.1 * len(self.batches), "kl": 0.0}


class FakePublisher:
    def __init__(self) -> None:
        self.versions: list[int] = []

    def publish(self, version: int) -> PublishReport:
        self.versions.append(version)
        return PublishReport(version=version, seconds=0.5, bytes_sent=1_000_000)


class RecordingSink:
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict]] = []
        self.summaries: list[dict] = []
        self.notes: list[str] = []

    def record(self, step: int, metrics: Mapping[str, float]) -> None:
        self.rows.append((step, dict(metrics)))

    def summary(self, summary: Mapping[str, object]) -> None:
        self.summaries.append(dict(summary))

    def update(self, step: int, metrics: Mapping[str, float]) -> None:
        pass

    def note(self, text: str) -> None:
        self.notes.append(text)

    def close(self) -> None:
        pass
