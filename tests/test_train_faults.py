"""Kill/resume of training (`dflash-train`), with real SIGKILLs of a child process at random points.

A run is SIGKILLed several times at seeded-random moments (inside a step, or while a checkpoint is being written),
relaunched with the same config each time, and finally allowed to finish. It must end with the same loss at every
step and bit-identical weights as a run that was never interrupted, and leave no temporary or superseded checkpoint directory.
"""
import json, os, random, signal, subprocess, sys, textwrap, time
from dataclasses import asdict
from pathlib import Path
import pytest, torch, yaml
from dflash_nb.extract import extract_to_cache
from dflash_nb.model import DFlashDraftModel
from dflash_nb.target import tiny_target
from dflash_nb.train import TrainConfig, latest_checkpoint, read_metrics, weight_digest

STEPS, SAVE_EVERY = 16, 2   # a step takes ~6 ms and a checkpoint ~5 ms here; starting the process ~3 s
ENV = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory):
    "A tiny hybrid target saved as a model directory and a float32 cache of 8 short samples with 5 taps."
    d = tmp_path_factory.mktemp("fx")
    tt = tiny_target("qwen3_5", num_layers=8, hidden_size=32, vocab_size=96, seed=0)
    tt.model.save_pretrained(d / "target")
    g = torch.Generator().manual_seed(0)
    samples = [{"input_ids": torch.randint(0, 95, (n,), generator=g), "loss_mask": (torch.arange(n) >= 3).long()}
               for n in (12, 20, 9, 16, 25, 14, 18, 11)]
    extract_to_cache(tt, samples, d / "cache", [1, 2, 3, 4, 5], dtype=torch.float32, samples_per_shard=4)
    return d


def run_config(fx: Path, out_dir: Path) -> Path:
    "Write the run's YAML (all TrainConfig fields, as `write_run_config` does) and return its path."
    cfg = TrainConfig(target=str(fx / "target"), cache=str(fx / "cache"), out_dir=str(out_dir),
                      drafter=dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                   intermediate_size=64, block_size=4, mask_token_id=95),
                      num_anchors=8, batch_size=2, lr=3e-3, warmup=0.1, steps=STEPS, log_every=1, save_every=SAVE_EVERY,
                      device="cpu", progress=False)
    path = out_dir.parent / f"{out_dir.name}.yaml"
    path.write_text(yaml.safe_dump(asdict(cfg.validate()), sort_keys=False))
    return path


def start(config: Path, code: str | None = None, env: dict | None = None) -> subprocess.Popen:
    "`python -m dflash_nb.train --config ...` (or `code` run with the same argv), its output in a log beside the config."
    cmd = [sys.executable, "-m", "dflash_nb.train"] if code is None else [sys.executable, "-c", code]
    with open(config.with_suffix(".log"), "a") as log:
        return subprocess.Popen(cmd + ["--config", str(config)], stdout=log, stderr=subprocess.STDOUT, env=ENV | (env or {}))


def logged_steps(out_dir: Path) -> list[int]:
    "Steps of the metrics.jsonl lines in file order (a resumed run logs some steps again)."
    f = out_dir / "metrics.jsonl"
    if not f.exists(): return []
    return [json.loads(l)["step"] for l in f.read_text().splitlines() if l.endswith("}")]


def final_digest(out_dir: Path) -> str:
    ck = latest_checkpoint(out_dir)
    saved = json.loads((ck / "training_state.json").read_text())["rank_weight_digests"]
    assert saved == [weight_digest(DFlashDraftModel.from_pretrained(ck))]
    return saved[0]


@pytest.fixture(scope="module")
def reference(fixture_dir):
    "The uninterrupted run's directory."
    out = fixture_dir / "whole"
    p = start(run_config(fixture_dir, out)); assert p.wait(timeout=300) == 0
    assert latest_checkpoint(out).name == f"step-{STEPS:07d}"
    return out


def kill_at(p: subprocess.Popen, out_dir: Path, step: int, delay: float, timeout: float = 120) -> bool:
    "SIGKILL `p` `delay` s after it logs `step` (a line appended after its start); False if it exited first."
    seen, t0 = len(logged_steps(out_dir)), time.time()
    while p.poll() is None and not any(s >= step for s in logged_steps(out_dir)[seen:]):
        assert time.time() - t0 < timeout, "the run made no progress"
        time.sleep(0.005)
    time.sleep(delay)
    if p.poll() is not None: return False
    os.kill(p.pid, signal.SIGKILL); p.wait(timeout=60)
    return True


def assert_same_run(out: Path, ref: Path):
    assert [r["step"] for r in read_metrics(out)] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in read_metrics(out)] == [r["loss"] for r in read_metrics(ref)]
    assert latest_checkpoint(out).name == f"step-{STEPS:07d}"
    assert final_digest(out) == final_digest(ref)
    leftovers = [p.name for p in (out / "checkpoints").iterdir() if p.name.startswith(".")]
    assert not leftovers, leftovers


def test_sigkill_training_at_random_points_then_resume(fixture_dir, reference):
    out, rng, kills = fixture_dir / "killed", random.Random(8), []
    config = run_config(fixture_dir, out)
    while len(kills) < 4:
        ck = latest_checkpoint(out)
        done = int(ck.name.split("-")[1]) if ck else 0
        if done + 1 > STEPS - 3: break
        step, delay = rng.randint(done + 1, min(done + 3, STEPS - 3)), rng.uniform(0.0, 0.02)  # within ~2 steps and saves
        p = start(config)
        if kill_at(p, out, step, delay): kills.append((step, round(delay, 3)))
        else: assert p.returncode == 0; break
    print("kills (step logged, delay s):", kills)
    assert len(kills) >= 3, kills
    p = start(config); assert p.wait(timeout=300) == 0
    assert_same_run(out, reference)


# A child that is `dflash-train` with `os.replace` wrapped, so it can SIGKILL itself at a chosen point of the checkpoint
# protocol: `save_checkpoint` renames `.step-N.tmp` to `step-N`, then replaces `latest.json` (via `latest.json.tmp`).
CHILD = textwrap.dedent("""
    import os, signal, sys
    where, step = os.environ["KILL_WHERE"], int(os.environ["KILL_STEP"])
    real = os.replace
    def replace(src, dst):
        src, dst = str(src), str(dst)
        if where == "before_rename" and dst.endswith(f"step-{step:07d}") and src.endswith(".tmp"): os.kill(os.getpid(), signal.SIGKILL)
        real(src, dst)
        if where == "before_latest" and dst.endswith(f"step-{step:07d}") and src.endswith(".tmp"): os.kill(os.getpid(), signal.SIGKILL)
    os.replace = replace
    from dflash_nb.train import main
    main(sys.argv[1:])
""")


@pytest.mark.parametrize("where", ["before_rename", "before_latest"])
def test_sigkill_inside_checkpoint_write_then_resume(fixture_dir, reference, where):
    "Killed while step 4 is being installed: the previous checkpoint stays the latest, and the resumed run is identical."
    out = fixture_dir / f"ckpt-{where}"
    config = run_config(fixture_dir, out)
    kill = dict(KILL_WHERE=where, KILL_STEP="4")
    p = start(config, CHILD, kill); p.wait(timeout=300)
    assert p.returncode == -signal.SIGKILL
    assert latest_checkpoint(out).name == "step-0000002"
    assert (out / "checkpoints" / ("step-0000004" if where == "before_latest" else ".step-0000004.tmp")).is_dir()
    p = start(config, CHILD, kill); p.wait(timeout=300)   # killed twice at the same point: two leftovers of step 4
    assert p.returncode == -signal.SIGKILL
    p = start(config); assert p.wait(timeout=300) == 0, config.with_suffix(".log").read_text()[-2000:]
    assert_same_run(out, reference)
