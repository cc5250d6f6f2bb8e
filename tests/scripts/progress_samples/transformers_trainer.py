"""Real transformers.Trainer output for tests/data/progress (transformers_trainer.txt): a tiny
BERT built from its config (nothing downloaded) trained 12 steps on CPU, logging every 3: its
log dicts (stdout) and its tqdm bar (stderr) on one pipe, as marun reads a rank.

    python tests/scripts/progress_samples/transformers_trainer.py 2>&1 | cat > out
    ... transformers_trainer.py dicts: disable_tqdm, the log dicts alone
    (transformers_trainer_dicts.txt)
"""

import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

torch.manual_seed(0)
config = BertConfig(
    vocab_size=64,
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=16,
)
rows = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.tensor(i % 2)} for i in range(96)]
args = TrainingArguments(
    output_dir=tempfile.mkdtemp(),
    max_steps=12,
    per_device_train_batch_size=8,
    logging_steps=3,
    report_to=[],
    save_strategy="no",
    use_cpu=True,
    disable_tqdm=sys.argv[1:] == ["dicts"],
)
Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=rows).train()
