"""dtrain.torch: a torch.nn.Module's parameters as dtrain variables.

    net = Net()
    model = dtrain.torch.TorchModel(net)      # names = net.state_dict() keys
    with dtrain.Supervisor(cluster, config, model.model) as sv:
        while not sv.should_stop():
            net.zero_grad()
            loss = criterion(net(x), y)
            loss.backward()
            model.step(sv, loss)               # gradients out, new values into the parameters

The parameters stay where they are: the session writes the fresh values
into their own memory (CPU float32 contiguous tensors; others are refused),
and their gradients are read in place. The chief's first values are the
module's own (init "given"), so the checkpoint's first values are what
Net() made; only trained parameters become variables (not buffers such as
a batch norm's running statistics).
"""
import numpy as np
import torch

import dtrain


class TorchModel:
    def __init__(self, module, init="given"):
        self.module = module
        self.model = dtrain.Model()
        self.params = []
        for name, p in module.named_parameters():
            if not p.requires_grad:
                continue
            if p.dtype != torch.float32 or p.device.type != "cpu" or not p.is_contiguous():
                raise dtrain.DtrainError(-1, "torch: parameter \"%s\" is not a CPU float32 "
                                         "contiguous tensor" % name)
            values = p.data.numpy()  # the parameter's own memory
            self.model.variable(name, tuple(p.shape) or (), init=init, out=values)
            self.params.append(p)
        self._zeros = [np.zeros(tuple(p.shape), dtype=np.float32) for p in self.params]

    def gradients(self):
        """The parameters' gradients as arrays on their memory (zeros for a
        parameter the loss did not reach)."""
        return [p.grad.numpy() if p.grad is not None else z
                for p, z in zip(self.params, self._zeros)]

    def step(self, session, loss):
        """After loss.backward(): pushes the gradients with the loss and
        puts the fresh values into the parameters. Returns the StepResult."""
        value = float(loss.detach()) if torch.is_tensor(loss) else float(loss)
        with torch.no_grad():
            return session.step(self.gradients(), value)
