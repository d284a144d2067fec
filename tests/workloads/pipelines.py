"""Python job shapes without a framework, each healthy unless told otherwise:

  --shape threads  a producer thread and two consumers on a queue.Queue, an Event to stop
  --shape asyncio  an asyncio service loop: tasks that await, compute a little and hand results
                   over (a loop that never waits, 1 ms calls back to back from one line, would look
                   like one long call to a sampler: the limit of sampling, see python_profile.cpp)
  --shape chain    this script starting itself through `bash -c` and then through subprocess,
                   two levels deep, each level waiting for the next
  --shape imports  imports numpy and scikit-learn (seconds of start-up), then a short fit

--fault slow_consumer makes `handle` take 400 ms for one item, in whichever consumer thread takes
it (threads shape): the one anomaly to find."""
import argparse
import asyncio
import os
import queue
import subprocess
import sys
import threading
import time

from fault_mark import mark_fault


def busy(ms):
    end = time.perf_counter() + ms / 1000
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def handle(item, slow):
    if slow:
        mark_fault()
        time.sleep(0.4)  # the injected fault
    return busy(2) + item


def threads_shape(fault):
    work = queue.Queue(maxsize=8)
    done = threading.Event()
    results = []

    def produce():
        for i in range(300):
            work.put(i)
            time.sleep(0.004)
        done.set()

    def consume(name):
        while not (done.is_set() and work.empty()):
            try:
                item = work.get(timeout=0.05)
            except queue.Empty:
                continue
            results.append(handle(item, fault == "slow_consumer" and item == 150))

    threads = [threading.Thread(target=produce)] + [
        threading.Thread(target=consume, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"handled={len(results)}", flush=True)


def asyncio_shape():
    async def worker(q, out):
        while True:
            item = await q.get()
            await asyncio.sleep(0.002)  # a request to another service
            out.append(busy(0.3) + item)
            q.task_done()

    async def service():
        q, out = asyncio.Queue(), []
        workers = [asyncio.create_task(worker(q, out)) for _ in range(3)]
        for i in range(400):
            await q.put(i)
            if i % 20 == 0:
                await asyncio.sleep(0.01)
        await q.join()
        for w in workers:
            w.cancel()
        print(f"served={len(out)}", flush=True)

    asyncio.run(service())


def chain_shape(depth):
    if depth == 0:
        busy(60)
        print("leaf done", flush=True)
        return
    me = [sys.executable, os.path.abspath(__file__), "--shape", "chain", "--depth", str(depth - 1)]
    if depth % 2:
        subprocess.run(["bash", "-c", " ".join(me)], check=True)
    else:
        subprocess.run(me, check=True)
    busy(50)


def imports_shape():
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 8))
    y = (x[:, 0] + x[:, 1] > 0).astype(int)
    print(f"score={LogisticRegression().fit(x, y).score(x, y):.2f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", choices=["threads", "asyncio", "chain", "imports"], required=True)
    p.add_argument("--fault", default="none", choices=["none", "slow_consumer"])
    p.add_argument("--depth", type=int, default=2)
    args = p.parse_args()
    print(f"pid={os.getpid()}", flush=True)
    if args.shape == "threads":
        threads_shape(args.fault)
    elif args.shape == "asyncio":
        asyncio_shape()
    elif args.shape == "chain":
        chain_shape(args.depth)
    else:
        imports_shape()


if __name__ == "__main__":
    main()
