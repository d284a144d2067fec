import keras
from keras import backend as K
from keras.layers import ThresholdedReLU


def build():
    inputs = keras.Input((8,))
    x = keras.layers.LocallyConnected1D(4, 3)(inputs)
    x = ThresholdedReLU(0.5)(x)
    x = keras.layers.Dense(4, kernel_constraint=keras.constraints.RadialConstraint())(x)
    norm = keras.layers.experimental.preprocessing.Normalization()
    return keras.Model(inputs, norm(x))


def tune(model):
    K.set_value(model.optimizer.learning_rate, K.get_value(model.optimizer.learning_rate) / 2)
    eps = K.epsilon() * K.floatx().__len__()
    return keras.optimizers.legacy.SGD(0.1), eps


def kernel_features():
    return keras.layers.experimental.RandomFourierFeatures(output_dim=64)
