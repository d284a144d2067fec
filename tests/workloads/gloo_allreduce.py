"""A real torch.distributed job on the gloo backend, started as torchrun starts workers:

  python3 gloo_allreduce.py --launch 2 [--late-rank R]

(Debian's `python3 -m torch.distributed.run` of torch 1.13 fails on Python 3.11 before it starts
any worker: `to_map` gets None for --redirects. So --launch does what it does: one process per
rank, exec'd with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and waits for them.)

Each rank computes a step and all-reduces its gradient-sized tensor with the others, 30 steps.
With --late-rank R, rank R runs `late_data_step` (400 ms asleep) before step 10's collective: the
one anomaly to find is that function on rank R; the other rank waits inside all_reduce meanwhile,
which is waiting for a peer, not a stall of its own."""
import argparse
import os
import socket
import subprocess
import sys
import time

from fault_mark import mark_fault

FAULT_STEP = 10
FAULT_S = 0.4


def late_data_step():
    mark_fault()
    time.sleep(FAULT_S)  # the injected fault


def launch(n, argv):
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = []
    for rank in range(n):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        ranks.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv], env=env))
    return max(r.wait() for r in ranks)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--launch", type=int, default=0, help="start this many ranks and wait")
    p.add_argument("--late-rank", type=int, default=-1)
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    if args.launch:
        rest = [a for a in sys.argv[1:] if a not in ("--launch", str(args.launch))]
        sys.exit(launch(args.launch, rest))
    import torch  # the ranks' only: the launcher, like torchrun's, needs no tensor
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    w = torch.randn(64, 64)
    for step in range(args.steps):
        g = torch.tanh(w @ torch.randn(64, 64))
        if step == FAULT_STEP and rank == args.late_rank:
            late_data_step()
        dist.all_reduce(g)
        w -= 0.01 * g / dist.get_world_size()
    dist.barrier()
    print(f"rank={rank} pid={os.getpid()} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
