# Every way a script names the same removed functions.
import torch as T
import torch.nn.functional as F
from torch import lstsq as ls
from torch.cuda import amp
import tensorflow as tf

K = tf.keras
layers = K.layers


def fit(a, b):
    x = T.lstsq(b, a)
    y = ls(b, a)
    return x, y


def activations(x):
    return F.tanh(x), F.sigmoid(x)


def mixed(model, batch):
    with amp.autocast():
        return model(batch)


def preprocess():
    return K.layers.experimental.preprocessing.Rescaling(1.0 / 255), layers.Dense(3)
