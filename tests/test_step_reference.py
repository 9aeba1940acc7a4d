"""The training step against the step it replaced, which read values back to the host.

`Trainer.one_step` keeps the loss, the acceptance counts and the grad norm on the device and reads them once per
logging step (`Trainer.record`). The reference below is the step as it was written before that: the loss read and
checked per micro-batch, the grad norm read per step (on CPU its noise came from the anchors' generator, as now).
From the same start, with noise, split fusion, KL and gradient accumulation, both give equal losses and grad norms and
bit-identical weights after 3 steps. (Moved here from `nbs/04a_train.ipynb`: a comparison with old code is history,
not something the notebook teaches.)
"""
import torch
from dflash_nb.batches import make_batch, step_generator
from dflash_nb.config import TrainConfig
from dflash_nb.objective import noisy_fc_input, step_loss
from dflash_nb.testing import tiny_run
from dflash_nb.train import Trainer, lr_at


def old_one_step(t: Trainer) -> tuple:
    "Reference: the step as it was, reading the loss back every micro-batch and the grad norm every step."
    cfg, loss = t.cfg, 0.0
    for micro in range(cfg.grad_accum):
        g = step_generator(cfg.seed, t.step, micro, t.rank)
        b = make_batch(t.data, t.plan[t.step * cfg.grad_accum + micro], t.dc, cfg, g).to(t.device)
        out = step_loss(t.wrapped, b, t.dc, cfg, t.readout, noisy_fc_input(b.fc_taps, t.noise, t.dc.hidden_size, g))
        assert torch.isfinite(out.loss)
        (out.loss / cfg.grad_accum).backward()
        loss += out.loss.item() / cfg.grad_accum
    grad_norm = torch.nn.utils.clip_grad_norm_(t.params, cfg.grad_clip).item()
    for grp in t.opt.param_groups: grp["lr"] = lr_at(t.step, t.total, cfg.lr, cfg.warmup)
    t.opt.step()
    t.opt.zero_grad(set_to_none=True)
    t.step += 1
    return loss, grad_norm


def test_step_equals_the_step_that_read_everything_back(tmp_path):
    run = tiny_run(tmp_path)
    same = run.base_cfg | dict(drafter=run.base_cfg["drafter"] | {"fusion": "split"}, loss="kl", noise_std=0.1,
                               noise_schedule="cosine", grad_accum=2, steps=6)
    t_old, t_new = (Trainer.from_config(TrainConfig(**same, out_dir=str(tmp_path / f"same-{k}")), run.target, run.cache)
                    for k in "ab")
    for _ in range(3):
        r = t_new.record(t_new.one_step())
        assert old_one_step(t_old) == (r["loss"], r["grad_norm"])
    assert all(torch.equal(a, b) for a, b in zip(t_old.params, t_new.params))
