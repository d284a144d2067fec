"""Least squares and eigen solvers of a small physics fit (written for PyTorch 1.8).

Calls torch.lstsq and torch.solve: the names in this docstring are not uses.
"""
import torch


def solve_system(A, B):
    # torch.solve(B, A) returns (solution, LU)
    X, _ = torch.solve(B, A)
    return X


def fit_least_squares(A, B):
    return torch.lstsq(B, A).solution[: A.size(1)]


def spectrum(M):
    values, _ = torch.eig(M)
    sym_values, vectors = torch.symeig(M, eigenvectors=True)
    return values, sym_values, vectors


def rank_and_products(M, N):
    rank = torch.matrix_rank(M)
    product = torch.chain_matmul(M, N, M)
    q, r = torch.qr(M)
    low = torch.cholesky(M @ M.t() + torch.eye(M.size(0)))
    return rank, product, q, r, low, torch.norm(M)


if __name__ == "__main__":
    A = torch.randn(4, 3)
    B = torch.randn(4, 2)
    print(fit_least_squares(A, B))
