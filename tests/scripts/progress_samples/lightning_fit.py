"""Real Lightning output for tests/data/progress: Trainer.fit of a tiny module on CPU, two
epochs, on a pipe. Its default bar is Rich's where `rich` is installed (printed once, at the
end, on a pipe: lightning_fit_rich.txt); `tqdm` as first argument takes the TQDM bar
(lightning_fit.txt).

    python tests/scripts/progress_samples/lightning_fit.py tqdm 2>&1 | cat > out
"""

import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, _index):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


torch.manual_seed(0)
data = TensorDataset(torch.randn(160, 8), torch.randn(160, 1))
trainer = L.Trainer(
    max_epochs=2,
    accelerator="cpu",
    logger=False,
    enable_checkpointing=False,
    enable_model_summary=False,
    callbacks=[L.pytorch.callbacks.TQDMProgressBar()] if sys.argv[1:] == ["tqdm"] else None,
)
trainer.fit(Tiny(), DataLoader(data, batch_size=16))
