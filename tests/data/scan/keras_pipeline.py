"""Image pipeline of a TF 2.14 job (the seed's incident)."""
import tensorflow as tf
from tensorflow.keras.layers.experimental import preprocessing

mp = tf.keras.mixed_precision


def build():
    mp.experimental.set_policy("mixed_float16")
    return tf.keras.Sequential([
        preprocessing.Resizing(224, 224),
        tf.keras.layers.experimental.preprocessing.Rescaling(1.0 / 255),
        tf.keras.layers.Dense(10),
    ])


def data():
    path = tf.keras.utils.get_file("flowers.tgz", "https://example.org/flowers.tgz")
    kept = tf.keras.utils.get_file("flowers.tgz", "https://example.org/flowers.tgz",
                                   cache_subdir="datasets")
    return path, kept


def optimizer():
    return mp.experimental.LossScaleOptimizer(tf.keras.optimizers.legacy.Adam(), "dynamic")
