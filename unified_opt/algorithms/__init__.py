"""One module per algorithm: hyperparameters, math (LaTeX) and the reference update."""

from .adam import Adam
from .adamw import AdamW
from .sgd import SGD

__all__ = ["Adam", "AdamW", "SGD"]
