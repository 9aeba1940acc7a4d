"""A notebook-first workbench for training, evaluating and diagnosing DFlash speculative-decoding drafters

Modules:

- `dflash_nb.cache`: The on-disk format of tapped hidden states: safetensors shards and a manifest, written resumably, checked on open, read lazily; and the import of legacy per-sample `.pt` caches.
- `dflash_nb.dflash2`: The grouped dynamic convolution DFlash 2 wraps around every sublayer, and the candidate selector that picks each slot's draft among the target head's top-K by a low-rank transition score from the previous draft.
- `dflash_nb.diagnose`: Two or more drafters for one target set side by side as a diff, measured with intervals over prompts, and the gap between them attributed by counterfactuals measured on the same prompts: `dflash-diagnose`.
- `dflash_nb.distributed`: Where a run's processes come from: the device, the process group, DDP or FSDP, collectives, machines that meet at a rendezvous, and a peer that goes away.
- `dflash_nb.extract`: Regenerate responses with the target, capture its tap layers with self-removing hooks, and stream them into the resumable, checksummed cache of `dflash_nb.cache`.
- `dflash_nb.objective`: What one training step computes from a batch: loss targets, the position-decayed CE or KL over a block's slots (a few anchors at a time), acceptance counts, noise on the fc input, and the per-slot gradient diagnostic.
- `dflash_nb.profile`: What a training step makes the host wait for: reads of device values counted by the function that asked, and a CUDA run's time per step and GPU utilisation.
- `dflash_nb.storage`: One way to write a file all-or-nothing, with the user's file mode; file and tensor digests; a check that a name read from a file stays in its directory; and an early check that an output directory can take what will be written. Every module that writes a file the workbench reads back uses these.
- `dflash_nb.study`: Variants of a training recipe, each trained over several seeds on the same data order and budget, evaluated on held-out prompts, and compared to a baseline with paired confidence intervals.
- `dflash_nb.train`: The DFlash training loop: a `Trainer` whose `fit`, `one_step` and `one_batch` read like the algorithm; exact resume, DDP or FSDP under torchrun, and the `dflash-train` command.
- `dflash_nb.trees`: A tree of drafts from one block: built best-first from the block's marginals, verified with a tree mask, walked along the target's own choices. Offline evaluation and online decoding both use it.
- `dflash_nb.verify`: One cached target forward that captures the drafter's taps; a hybrid's Gated DeltaNet layers run node by node so that a rejected tail can be undone; the cache cut back to the accepted tokens. The code that re-runs transformers' Gated DeltaNet forward or edits its cache layers is all here: this notebook is what the transformers pin guards."""

__version__ = "0.0.1"
