"""One module per algorithm: hyperparameters, math (LaTeX) and the reference update."""

from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam
from .adamax import Adamax
from .adamw import AdamW
from .lion import Lion
from .nadam import NAdam
from .radam import RAdam
from .rmsprop import RMSprop
from .rprop import Rprop
from .sgd import SGD

__all__ = ["Adadelta", "Adagrad", "Adam", "Adamax", "AdamW", "Lion", "NAdam", "RAdam",
           "RMSprop", "Rprop", "SGD"]
