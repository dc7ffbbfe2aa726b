"""The scripts the zero-edit tests run: ordinary Trainer scripts (nothing of turbotrain in them) on a tiny
GPT-2 without dropout and fixed random tokens, each writing what it saw as JSON into its output folder."""

MODEL_AND_DATA = """
import json, os, sys
import torch, transformers
from datasets import Dataset
from transformers import Trainer, TrainingArguments


def model_and_data():
    config = transformers.GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    ids = torch.randint(3, 96, (24, 37), generator=torch.Generator().manual_seed(0))
    data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    return transformers.GPT2LMHeadModel(config), data
"""

SUBCLASS = (
    MODEL_AND_DATA
    + """

class MyTrainer(Trainer):  # a script's own subclass: it must get turbotrain too
    def log(self, logs, *args, **kwargs):
        super().log(logs, *args, **kwargs)


def main(out):
    model, data = model_and_data()
    args = TrainingArguments(output_dir=out, max_steps=6, per_device_train_batch_size=4, logging_steps=1,
                             report_to="none", save_strategy="no", disable_tqdm=True, learning_rate=1e-3)
    trainer = MyTrainer(model=model, args=args, train_dataset=data)
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    mro = [c.__name__ for c in type(trainer).__mro__]
    json.dump({"losses": losses, "mro": mro, "args": type(args).__name__}, open(out + "/result.json", "w"))


if __name__ == "__main__":
    main(sys.argv[1])
"""
)

DATA_PARALLEL = (
    MODEL_AND_DATA
    + """
model, data = model_and_data()
args = TrainingArguments(output_dir=sys.argv[1], max_steps=3, per_device_train_batch_size=2, logging_steps=1,
                         report_to="none", save_strategy="no", disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=data)
trainer.train()
with open(os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump({"world": args.world_size, "trainer": type(trainer).__name__,
               "backend": trainer.backend.name, "passes": trainer.turbo_report.applied}, f)
"""
)
