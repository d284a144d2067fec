"""A real GPU job for checking eacgm's probes on a machine with an NVIDIA GPU (tests/gpu/validate.sh
runs it there; CI has no GPU and does not).

  --mode train    a small CNN trained on the GPU from a DataLoader with 2 workers, --steps steps;
                  --fault slow_main makes `slow_checkpoint` sleep 400 ms once at step 40
                  (printing `fault_start_ns= pid=`). Prints `steps_per_s=` of the step loop.
  --mode counted  after a warm-up, --n iterations of known calls, each: one elementwise add (a
                  PyTorch kernel: cudaLaunchKernel), one matrix product (cuBLAS, which launches
                  through the driver), one one-element copy to the host (.item()), one NCCL
                  all-reduce (a one-rank group) and one Triton kernel (launched through the
                  driver). Two sessions of different --n differ by exactly that many calls of each.
  --mode jax      --n calls of a jitted JAX function (XLA launches through the driver).

Prints `pid=<pid>` first."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "workloads"))


def slow_checkpoint():
    from fault_mark import mark_fault
    mark_fault()
    time.sleep(0.4)


def train(args):
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    class Images(Dataset):
        def __len__(self):
            return args.steps * 32

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return torch.randn(3, 32, 32, generator=g), i % 10

    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64 * 8 * 8, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Images(), batch_size=32, num_workers=2)
    start = None
    for step, (x, y) in enumerate(loader):
        if step == 5:
            torch.cuda.synchronize()
            start = time.monotonic()
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        if args.fault == "slow_main" and step == 40:
            slow_checkpoint()
    torch.cuda.synchronize()
    print(f"steps_per_s={(args.steps - 5) / (time.monotonic() - start):.2f}", flush=True)


def counted(args):
    import torch
    import torch.distributed as dist
    import triton
    import triton.language as tl

    @triton.jit
    def triton_add(x, y, out, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    a = torch.randn(256, 256, device="cuda")
    b = torch.randn(256, 256, device="cuda")
    c, d, t = torch.empty_like(a), torch.empty_like(a), torch.empty_like(a)

    def once():
        torch.add(a, b, out=d)
        torch.mm(a, b, out=c)
        c[0, 0].item()
        dist.all_reduce(d)
        triton_add[(a.numel() // 1024,)](a, b, t, a.numel(), BLOCK=1024)

    for _ in range(3):  # warm-up: cuBLAS handles, NCCL communicator, Triton's compile
        once()
    torch.cuda.synchronize()
    for _ in range(args.n):
        once()
    torch.cuda.synchronize()
    dist.destroy_process_group()


def jax_calls(args):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp

    f = jax.jit(lambda x: jnp.sin(x) * 2 + 1)
    x = jnp.ones((1024, 1024))
    for _ in range(3):
        f(x).block_until_ready()
    for _ in range(args.n):
        f(x).block_until_ready()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["train", "counted", "jax"], required=True)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--fault", choices=["none", "slow_main"], default="none")
    args = p.parse_args()
    print(f"pid={os.getpid()}", flush=True)
    {"train": train, "counted": counted, "jax": jax_calls}[args.mode](args)


if __name__ == "__main__":
    main()
