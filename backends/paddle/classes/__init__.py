"""Paddle's optimizer classes as descriptors (:class:`.descriptor.PaddleClass`), in
decision order; imports no framework."""

from . import basic, communication, large_batch
from .descriptor import PaddleClass

CLASSES = basic.CLASSES + large_batch.CLASSES + communication.CLASSES

__all__ = ["CLASSES", "PaddleClass"]
