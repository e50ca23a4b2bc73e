"""A small torch training loop: the sample script of ``unified-opt port`` (docs/porting.md).

    unified-opt port examples/port/train_torch.py --to paddle -o train_paddle.py
"""

import torch
from torch import nn

STEPS = 200
WEIGHT_DECAY = 0.05


def main() -> list[float]:
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    # AdamW with a cosine schedule over the whole run
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.99),
                                  weight_decay=WEIGHT_DECAY)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=STEPS)
    losses = []
    for _ in range(STEPS):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


if __name__ == "__main__":
    losses = main()
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
