"""One module per algorithm: hyperparameters, math (LaTeX) and the reference update."""

from .adadelta import Adadelta
from .adafactor import Adafactor
from .adagrad import Adagrad
from .adam import Adam
from .adam_offload import AdamOffload
from .adamax import Adamax
from .adamw import AdamW
from .came import CAME
from .dgc_momentum import DGCMomentum
from .lamb import Lamb
from .lars import LARS
from .lion import Lion
from .nadam import NAdam
from .radam import RAdam
from .rmsprop import RMSprop
from .rprop import Rprop
from .sgd import SGD

__all__ = ["CAME", "LARS", "SGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamOffload",
           "Adamax", "AdamW", "DGCMomentum", "Lamb", "Lion", "NAdam", "RAdam", "RMSprop",
           "Rprop"]
