"""A real PyTorch CPU training job: a small CNN (or an MLP) trained from a DataLoader, with
optimizer and backward, the shape of most jobs eacgm watches. Faults are injected on request and
labelled, so a test knows exactly which anomaly is right:

  --fault none         healthy
  --fault slow_main    `slow_checkpoint` in the main process sleeps 400 ms once, mid-run
  --fault slow_worker  `SyntheticImages.__getitem__` in a DataLoader worker sleeps 400 ms, at one
                       sample of the data set (so once per epoch: one finding, seen each epoch)
  --fault blocking_read  the training loop blocks 400 ms reading a pipe nobody writes to yet

A change, unlike a fault, lasts the whole run (every step), as an upgrade's would:

  --change none        healthy
  --change slow_op     the convolutions do more work for the same result: their 3x3 kernels
                       are padded with zero taps to 11x11 and 7x7 (the padding widened to match,
                       the zero taps put back to zero after each optimizer step), so every tensor
                       of the job keeps its shape and its values (the loss is the same to the
                       last digit) and only the convolution operators take longer: aten::conv2d
                       and the ops it calls about 1.5x, aten::convolution_backward about 1.8x,
                       traced by eacgm on a 2-CPU machine. Same values matter: with others (an
                       11x11 kernel initialised afresh), pooling and ReLU, forward and backward,
                       took other times too, their work depending on the data.

Phases a real job has beside its training steps, healthy, each epoch:

  --eval-batches N     a validation pass of N batches (model.eval(), no gradients)
  --checkpoint PATH    the model's and the optimizer's state saved to PATH (torch.save)

Prints one line `pid=<main pid>` first, so a test can tell the main process from its workers,
and `fault_start_ns=<CLOCK_MONOTONIC ns> pid=<pid>` as an injected fault begins."""
import argparse
import os
import threading
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from fault_mark import mark_fault

FAULT_STEP = 12  # the step at which an injected fault strikes
FAULT_S = 0.4
SLOW_KERNELS = (11, 7)  # --change slow_op: the two convolutions' kernels, padded from 3x3


class SyntheticImages(Dataset):
    def __init__(self, n, fault_index):
        self.n = n
        self.fault_index = fault_index

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fault_index:
            mark_fault()
            time.sleep(FAULT_S)  # the injected fault: one slow sample
        g = torch.Generator().manual_seed(i)
        return torch.randn(1, 16, 16, generator=g), i % 10


def model_for(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 10))
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 4 * 4, 10))


def pad_kernels(model, kernels):
    """--change slow_op: widens each convolution's 3x3 kernel to the size in `kernels`, with the
    new taps zero and the padding to match, and returns a function that puts those taps back to
    zero after each optimizer step. Every tensor of the job keeps its shape and its values (the
    central taps learn exactly as before); only the convolution operators, forward and backward,
    do more work."""
    padded = []
    with torch.no_grad():
        for conv, k in zip([m for m in model if isinstance(m, nn.Conv2d)], kernels):
            o = (k - 3) // 2
            conv.weight = nn.Parameter(nn.functional.pad(conv.weight, (o, o, o, o)))
            conv.kernel_size, conv.padding = (k, k), (k // 2, k // 2)
            mask = torch.zeros_like(conv.weight)
            mask[:, :, o:o + 3, o:o + 3] = 1
            padded.append((conv.weight, mask))

    def rezero():
        with torch.no_grad():
            for weight, mask in padded:
                weight.mul_(mask)  # the gradient reaches the zero taps too: drop what it added
    return rezero


def slow_checkpoint():
    mark_fault()
    time.sleep(FAULT_S)  # the injected fault: a slow function in the main process


def blocking_read():
    r, w = os.pipe()
    mark_fault()
    threading.Timer(FAULT_S, os.write, (w, b"x")).start()
    os.read(r, 1)  # the injected fault: the loop waits on a read
    os.close(r)
    os.close(w)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--persistent", action="store_true")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batches", type=int, default=12, help="batches per epoch")
    p.add_argument("--seconds", type=float, default=0,
                   help="train whole epochs until this long has passed (--epochs is then ignored)")
    p.add_argument("--fault", default="none",
                   choices=["none", "slow_main", "slow_worker", "blocking_read"])
    p.add_argument("--change", default="none", choices=["none", "slow_op"])
    p.add_argument("--eval-batches", type=int, default=0,
                   help="a validation pass of this many batches after each epoch")
    p.add_argument("--checkpoint", help="save the model and optimizer here after each epoch")
    args = p.parse_args()
    print(f"pid={os.getpid()}", flush=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    batch = 16
    fault_index = (FAULT_STEP - 1) * batch + 3 if args.fault == "slow_worker" else -1
    data = SyntheticImages(args.batches * batch, fault_index)
    loader_args = dict(batch_size=batch, num_workers=args.workers)
    if args.workers and args.persistent:
        loader_args["persistent_workers"] = True
    loader = DataLoader(data, **loader_args)
    model = model_for(args.model)
    rezero = pad_kernels(model, SLOW_KERNELS) if args.change == "slow_op" else None
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    # Validation samples come after the training ones: other data, the same workers' setting.
    validation = DataLoader(SyntheticImages(args.batches * batch + args.eval_batches * batch, -1),
                            sampler=range(args.batches * batch,
                                          args.batches * batch + args.eval_batches * batch),
                            **loader_args) if args.eval_batches else None
    step = 0
    started = time.monotonic()
    epoch = 0
    while (time.monotonic() - started < args.seconds) if args.seconds else epoch < args.epochs:
        epoch += 1
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            if rezero:
                rezero()
            step += 1
            if step == FAULT_STEP and args.fault == "slow_main":
                slow_checkpoint()
            if step == FAULT_STEP and args.fault == "blocking_read":
                blocking_read()
        if validation:
            model.eval()
            correct = 0
            with torch.no_grad():
                for x, y in validation:
                    correct += (model(x).argmax(1) == y).sum().item()
            model.train()
        if args.checkpoint:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "epoch": epoch}, args.checkpoint)
    print(f"steps={step} loss={loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
