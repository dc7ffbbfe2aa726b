"""Each host loads only its own rows of every global batch, in the order one host would see them.

Trainer's dataloader yields batches of `per_device_train_batch_size` x this host's devices rows. On
several hosts, host p keeps batches p, p + H, p + 2H, ... of it (accelerate's `BatchSamplerShard`,
what Trainer does itself under torchrun): global batch s is then the concatenation of the hosts'
s-th batches, which is one host's batch s of H times the rows, sample for sample. Only the kept
batches are read and collated. The sampler is shared, not re-drawn: every host walks the same order
(Trainer's seedable sampler, seeded by `args.seed` / `data_seed`). A last global batch that does not
fill every host is completed with samples from the start of the epoch (accelerate's `even_batches`,
as under torchrun), where one host would pad a short batch.

Under torchrun Trainer's dataloader is already sharded this way by accelerate and is left as it is.
"""

from __future__ import annotations

from accelerate.data_loader import prepare_data_loader

from turbotrain.backends.xla.hosts import Hosts


def host_dataloader(dataloader, hosts: Hosts, block: int, trainer_is_distributed: bool):
    """Trainer's train dataloader reduced to this host's batches (unchanged on one host or under torchrun)."""
    if not hosts.several or trainer_is_distributed:
        return dataloader
    return prepare_data_loader(
        dataloader,
        num_processes=hosts.count,
        process_index=block,
        split_batches=False,
        put_on_device=False,
        even_batches=True,
        use_seedable_sampler=False,  # keep Trainer's sampler (and its seed) rather than making a new one
    )
