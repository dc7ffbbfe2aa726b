"""`loss.png`: training and held-out loss against steps (left) and training wall time (right), one line
per run (TurboTrainer, and stock Trainer with `--compare`). Needs the `plot` extra (matplotlib)."""

from __future__ import annotations

from pathlib import Path

from turbotrain.pretrain.callbacks import Curves
from turbotrain.utils.plotting import pyplot


def plot_losses(runs: dict[str, Curves], path: Path, target: float | None = None) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for (name, curves), color in zip(runs.items(), ("tab:blue", "tab:orange", "tab:green")):
        for axis, x in zip(axes, ("step", "seconds")):
            axis.plot(
                [getattr(p, x) for p in curves.train],
                [p.value for p in curves.train],
                color=color,
                alpha=0.45,
                label=f"{name} training",
            )
            axis.plot(
                [getattr(p, x) for p in curves.held_out],
                [p.value for p in curves.held_out],
                color=color,
                marker="o",
                markersize=3,
                label=f"{name} held-out",
            )
    for axis, label in zip(axes, ("step", "training wall time (s, evaluation excluded)")):
        if target is not None:
            axis.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:.2f}")
        axis.set_xlabel(label)
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("masked-LM loss")
    axes[1].legend(fontsize=8)
    fig.suptitle("turbotrain pretrain: loss")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
