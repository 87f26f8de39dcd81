"""Runs where teams already look: TensorBoard, MLflow, Weights & Biases, Trackio.

    session = rlnb.connect("local", sinks=[rlnb.sinks.TensorBoard("tb"), rlnb.sinks.MLflow()])
    rlnb.sweep.sweep(base, configs, sinks=[rlnb.sinks.WandB("my-project")])
    rlnb.export("rlnb-runs/<run-id>", rlnb.sinks.Trackio("my-project"))

Each sink receives the run's config as hyperparameters, one point per optimizer step (loss, grad
norms, clip threshold, learning rate, step time and the figures given to ``history.log``) and
failed operations as events with their error code. Sinks write on their own threads; one that
fails warns once (``SinkWarning``) and is dropped, and training and the run store carry on. Each
library is an extra (``pip install 'rlnb[tensorboard]'``, ...), imported when its sink is created.
"""

from rlnb.sinks.base import Failure, Point, RunInfo, Sink, SinkError, SinkWarning, Writer
from rlnb.sinks.exporting import export
from rlnb.sinks.mlflow import MLflow
from rlnb.sinks.stream import Attachment, attach
from rlnb.sinks.tensorboard import TensorBoard
from rlnb.sinks.trackio import Trackio
from rlnb.sinks.wandb import WandB

__all__ = [
    "Attachment",
    "Failure",
    "MLflow",
    "Point",
    "RunInfo",
    "Sink",
    "SinkError",
    "SinkWarning",
    "TensorBoard",
    "Trackio",
    "WandB",
    "Writer",
    "attach",
    "export",
]
