"""train_cnn.py's job (the same CNN trained from a DataLoader with worker processes, optimizer and
backward) with one more operator, whose input a flag sets: after each step, the softmax of a
buffer of scores (the confidences a monitoring hook might log), `--score-rows` rows of 10 classes.

The default buffer is small. A larger one makes that softmax's input bigger, so `aten::_softmax`
(the kernel under `aten::softmax.int`) takes longer while every other operator is called as often,
on the same inputs: one operator slowed down, the change `eacgm slo check` must pin on it alone
(tests/bpf/test_slo.py).

Prints one line `pid=<main pid>` first, as train_cnn.py does."""
import argparse
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_cnn import SyntheticImages, model_for  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batches", type=int, default=12, help="batches per epoch")
    p.add_argument("--score-rows", type=int, default=64,
                   help="rows of the score buffer whose softmax each step takes")
    args = p.parse_args()
    print(f"pid={os.getpid()}", flush=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    # 12 images a batch, not train_cnn.py's 16: at 16, the first convolution's activations are
    # exactly 128 KiB, glibc's mmap threshold, and whether the ReLU's gradient of them is mapped
    # afresh every third step (page faults: aten::threshold_backward 55 us instead of 12) or never
    # differed from run to run (3 runs in 30), a bimodal job no healthy baseline can hold.
    batch = 12
    loader = DataLoader(SyntheticImages(args.batches * batch, -1), batch_size=batch,
                        num_workers=args.workers)
    model = model_for("cnn")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    scores = torch.randn(args.score_rows, 10, generator=torch.Generator().manual_seed(1))
    step = 0
    for _ in range(args.epochs):
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            with torch.no_grad():
                confidence = torch.softmax(scores, dim=1)
            step += 1
    print(f"steps={step} loss={loss.item():.4f} confidence={confidence.max().item():.4f}",
          flush=True)


if __name__ == "__main__":
    main()
