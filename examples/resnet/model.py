"""A small ResNet for 32x32 images, in plain torch.nn, split into two pipeline stages.

Every process builds it from the same seed, so the two stages on two workers compute
exactly what the whole model computes on the leader, which checks every answer.
"""

import torch
from torch import nn

BATCH = 8
IMAGE = (3, 32, 32)
BETWEEN_STAGES = (32, 16, 16)  # what stage 0 hands to stage 1, per image
CLASSES = 10


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


def build(seed: int = 0) -> nn.Sequential:
    """The whole model, in eval mode: stem, four stages of blocks, a linear head."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()),
        BasicBlock(16, 16),
        BasicBlock(16, 32, stride=2),
        BasicBlock(32, 64, stride=2),
        BasicBlock(64, 64),
        nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, CLASSES)))
    return model.eval()


def stages(model: nn.Sequential) -> tuple[nn.Sequential, nn.Sequential]:
    """(stem and the first two blocks, the rest): the pipeline's two halves."""
    return model[:3], model[3:]


def images(index: int) -> torch.Tensor:
    """Batch number ``index`` of the synthetic data set, the same in every process:
    noise over a per-image colour cast, so that images (and answers) differ."""
    generator = torch.Generator().manual_seed(1000 + index)
    cast = 2.0 * torch.randn(BATCH, IMAGE[0], 1, 1, generator=generator)
    return torch.randn(BATCH, *IMAGE, generator=generator) + cast
