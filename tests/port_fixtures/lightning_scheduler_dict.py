"""Port fixture (d): a ``configure_optimizers`` returning an optimizer and a scheduler
dict.

The shape reproduced, as read in Lightning's documentation of
``LightningModule.configure_optimizers`` and in modules using it (e.g.
automl/FOB, pytorch_fob/optimizers/adamw_baseline/optimizer.py): the method builds the
optimizer over ``self.parameters()`` and a scheduler on it, and returns
``{"optimizer": ..., "lr_scheduler": {"scheduler": ..., "interval": "step"}}``; the
trainer steps the scheduler after every optimizer step. Written for this project's tests
(a plain ``torch.nn.Module`` stands for the ``LightningModule``).
"""

import torch


class Classifier(torch.nn.Module):
    hparams = {"lr": 2e-2, "weight_decay": 0.02, "max_steps": 60}

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams["lr"],
                                      weight_decay=self.hparams["weight_decay"])
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            optimizer, T_max=self.hparams["max_steps"], eta_min=1e-3)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def make_optimizer(model):
    configured = Classifier.configure_optimizers(model)
    return configured["optimizer"], configured["lr_scheduler"]["scheduler"]
