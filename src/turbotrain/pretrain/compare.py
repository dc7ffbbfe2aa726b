"""Time-to-quality (`--compare`): wall time for stock `Trainer` and `TurboTrainer` to reach one held-out loss.

Both train the same model from the same seed on the same batches (stock pads them, TurboTrainer packs
them and runs its passes), scored on the same fixed held-out masks (callbacks.HeldOutCurve, evaluation
time excluded). The target is the worse of the two runs' best held-out losses, so both reach it; each
run's time to it is interpolated linearly between the evaluations around the first crossing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from turbotrain.pretrain.callbacks import CurvePoint, Curves


@dataclass
class TimeToQuality:
    target_loss: float
    stock_seconds: float
    turbo_seconds: float
    stock_step: int
    turbo_step: int

    @property
    def speedup(self) -> float:
        return self.stock_seconds / self.turbo_seconds

    def as_dict(self) -> dict:
        return {**asdict(self), "speedup": self.speedup}


def time_to_loss(points: list[CurvePoint], target: float) -> tuple[float, int]:
    """(seconds, step) of the first crossing of `target`, interpolated between the two evaluations around it."""
    previous = None
    for point in points:
        if point.value <= target:
            if previous is None or previous.value == point.value:
                return point.seconds, point.step
            share = (previous.value - target) / (previous.value - point.value)
            return previous.seconds + share * (point.seconds - previous.seconds), point.step
        previous = point
    raise ValueError(f"the run never reached held-out loss {target:.3f}")


def time_to_quality(stock: Curves, turbo: Curves) -> TimeToQuality:
    target = max(min(p.value for p in stock.held_out), min(p.value for p in turbo.held_out))
    stock_seconds, stock_step = time_to_loss(stock.held_out, target)
    turbo_seconds, turbo_step = time_to_loss(turbo.held_out, target)
    return TimeToQuality(target, stock_seconds, turbo_seconds, stock_step, turbo_step)
