"""Real MindSpore output for tests/data/progress (mindspore_train.txt): Model.train with
LossMonitor on CPU, as a pipe receives it.

    .cache/venvs/mindspore/bin/python tests/scripts/progress_samples/mindspore_train.py | cat > out
"""

import numpy as np
from mindspore import Model, context, nn
from mindspore.dataset import GeneratorDataset
from mindspore.train.callback import LossMonitor

context.set_context(mode=context.PYNATIVE_MODE, device_target="CPU")
rng = np.random.default_rng(0)
data = [(rng.normal(size=(8,)).astype(np.float32), np.ones((1,), np.float32)) for _ in range(64)]
dataset = GeneratorDataset(data, ["x", "y"], shuffle=False).batch(8)
net = nn.Dense(8, 1)
model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), learning_rate=0.01))
model.train(2, dataset, callbacks=[LossMonitor(1)], dataset_sink_mode=False)
