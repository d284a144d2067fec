import tensorflow as tf
import tensorflow.compat.v1 as v1
from tensorflow.keras import backend as KB


def input_fn():
    x = v1.placeholder(tf.float32, [None, 3])
    return x


def estimator(model_dir):
    return tf.estimator.DNNClassifier(hidden_units=[8], feature_columns=[], model_dir=model_dir)


def session_tricks(model):
    session = KB.get_session()
    KB.set_learning_phase(1)
    f = KB.function([model.input], [model.output])
    features = tf.keras.layers.experimental.RandomFourierFeatures(16)
    local = tf.keras.layers.LocallyConnected2D(4, 3)
    eps = KB.epsilon()
    return session, f, features, local, eps


def keras2_graph_code():
    inputs = KB.placeholder(shape=(None, 3))
    return tf.keras.layers.experimental.EinsumDense("ab,bc->ac", output_shape=4)(inputs)
