"""MindSpore's optimizer classes as descriptors (:class:`.descriptor.MindSporeClass`), in
decision order; imports no framework."""

from . import experimental, large_batch, memory_saving, nn
from .descriptor import MindSporeClass

CLASSES = nn.CLASSES + experimental.CLASSES + memory_saving.CLASSES + large_batch.CLASSES

__all__ = ["CLASSES", "MindSporeClass"]
