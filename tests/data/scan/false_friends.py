"""torch.lstsq, torch.solve and tf.estimator in a docstring are not uses."""
import numpy as np
import torch

MESSAGE = "torch.lstsq(B, A) was removed; so was torch.solve"
# torch.lstsq(B, A) in a comment is not a use either
template = f"{np.pi} and torch.eig"


def solve(A, B):
    """A user function that happens to be called solve."""
    return np.linalg.solve(A, B)


class Solver:
    lstsq = staticmethod(np.linalg.lstsq)

    def fit(self, A, B):
        lstsq = self.lstsq
        return lstsq(A, B)


def run(solver, torch_module):
    lstsq = solver.lstsq
    eig = np.linalg.eig
    result = solve(np.eye(2), np.ones(2))
    torch = torch_module
    return lstsq, eig, result, torch.lstsq


def shadowed(torch):
    return torch.solve(1, 2)


def fine():
    return torch.linalg.lstsq(torch.eye(2), torch.ones(2, 1)), torch.linalg.solve
