import torch


def half_written(x:
    return torch.lstsq(x, x)
