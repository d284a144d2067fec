import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader


class Scaled(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd
    def forward(ctx, x):
        return x * 2

    @staticmethod
    @torch.cuda.amp.custom_bwd
    def backward(ctx, grad):
        return grad * 2


def loaders(dataset):
    train = DataLoader(dataset, batch_size=32,
                       prefetch_factor=4)
    test = DataLoader(dataset, batch_size=32, num_workers=2)
    return train, test


def train(model, optimizer, loader):
    scaler = torch.cuda.amp.GradScaler()
    for batch in loader:
        with torch.cuda.amp.autocast():
            loss = model(batch).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)


def features(signal, window):
    old = torch.stft(signal, 400, 160)
    new = torch.stft(signal, 400, 160, window=window, return_complex=True)
    up = F.upsample(old, scale_factor=2)
    return old, new, up


def restore(path, model):
    state = torch.load(path)
    trusted = torch.load(path, weights_only=True)
    model.load_state_dict(state)
    torch.testing.assert_allclose(trusted["w"], state["w"])


torch.set_default_tensor_type(torch.cuda.FloatTensor)
